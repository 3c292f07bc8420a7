"""On the GPU: EAGLE-3 and EAGLE-1 heads loaded from checkpoints run inside the step graph (an EAGLE-3 head's
target tapped at three layers), giving what the eager step gives, and greedy output equals the target's."""

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

from stepgraph import RunnerConfig, Toggles  # noqa: E402
from stepgraph.adapters.hf import hf_spec_decoder  # noqa: E402
from stepgraph.drafts import load_eagle  # noqa: E402
from tests.e2e.test_eagle import H, V, eagle1_weights, head_weights, write  # noqa: E402
from tests.e2e.test_hf_adapter import llama  # noqa: E402
from tests.helpers import hf_greedy  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("chunk", [None, 5], ids=["whole", "chunked"])
@pytest.mark.parametrize("kind", ["eagle3", "eagle1"])
def test_step_graph_with_an_eagle_head_equals_eager(tmp_path, dtype, chunk, kind):
    target = llama(H, 6, 4, 2, seed=0, vocab=V).to("cuda", dtype)
    weights = head_weights() if kind == "eagle3" else eagle1_weights()
    head = load_eagle(write(tmp_path / "head", weights), target, max_requests=3, max_seq_len=96)
    prompts = [[5, 17, 99, 3], [42, 7, 7, 8, 31, 9], [1, 2]]
    outs = []
    for toggles in (Toggles.all(True), Toggles(step_graph=False, prefill_graph=False)):
        dec = hf_spec_decoder(
            target, head, max_requests=3, max_seq_len=96, prefill_chunk=chunk,
            config=RunnerConfig(toggles=toggles, progress=False),
        )  # fmt: skip
        outs.append(dec.generate(prompts, max_new_tokens=16, eos_token_id=None))
        if toggles.step_graph:
            assert dec.info()["captured_keys"] and dec.info()["eager_runs"] == 0
        dec.release()
    assert outs[0] == outs[1]
    if dtype == torch.float32:
        assert outs[0] == [hf_greedy(target, p, 16, eos_token_id=None) for p in prompts]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("kind", ["eagle3", "mtp"])
def test_the_example_heads_in_the_step_graph_equal_eager(dtype, kind):
    from stepgraph.examples.model import build, greedy_reference
    from stepgraph.speculative.decoder import SpecDecoder

    target, head = build("tiny", device="cuda", dtype=dtype, draft=kind, num_layers=6)
    prompts = [[5, 6, 7, 8, 9] * 3, [1, 2, 3], [4]]
    outs = []
    for toggles in (Toggles.all(True), Toggles(step_graph=False, prefill_graph=False)):
        dec = SpecDecoder.for_example(
            target, head, num_draft_tokens=3, max_batch=4, config=RunnerConfig(toggles=toggles, progress=False)
        )
        outs.append(dec.generate(prompts, max_new_tokens=20))
        dec.release()
    assert outs[0] == outs[1]
    if dtype == torch.float32:
        assert outs[0] == [greedy_reference(target, p, 20) for p in prompts]


def test_an_mtp_head_decodes_as_eagerly_and_as_the_target(tmp_path):
    """DeepSeek-V3's layout; its MoE layers may not capture (transformers' expert loop), in which case the
    key runs eagerly: either way the tokens are the eager step's and the target's."""
    from stepgraph.drafts import load_mtp
    from tests.e2e.test_hf_cache_shapes import deepseek_v3
    from tests.e2e.test_mtp import mtp_weights
    from tests.e2e.test_mtp import write as write_mtp

    target = deepseek_v3(2, seed=0).to("cuda")
    target.generation_config.eos_token_id = None
    head = load_mtp(write_mtp(tmp_path / "ckpt", mtp_weights(target)), target, max_requests=2, max_seq_len=48)
    prompts = [[5, 17, 99, 3, 42, 7], [9, 8]]
    outs = []
    for toggles in (Toggles.all(True), Toggles(step_graph=False, prefill_graph=False)):
        dec = hf_spec_decoder(target, head, max_requests=2, max_seq_len=48, num_draft_tokens=2, attention="gather",
                              config=RunnerConfig(toggles=toggles, progress=False))  # fmt: skip
        outs.append(dec.generate(prompts, max_new_tokens=8))
        dec.release()
    assert outs[0] == outs[1] == [hf_greedy(target, p, 8) for p in prompts]
