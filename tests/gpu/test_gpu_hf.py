"""HF adapter on the GPU: the step graph equals the eager step; agreement with generate() is measured."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from stepgraph import RunnerConfig, Toggles  # noqa: E402
from stepgraph.adapters.hf import hf_spec_decoder  # noqa: E402
from tests.e2e.test_hf_adapter import PROMPTS, llama  # noqa: E402

pytestmark = pytest.mark.gpu


def models(dtype):
    return llama(64, 2, 4, 2, seed=0).to("cuda", dtype), llama(32, 1, 2, 1, seed=1).to("cuda", dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hf_step_graph_equals_eager(dtype):
    outs = []
    for toggles in (Toggles.all(True), Toggles(step_graph=False)):
        target, draft = models(dtype)
        dec = hf_spec_decoder(
            target, draft, max_requests=4, max_seq_len=96, config=RunnerConfig(toggles=toggles, progress=False)
        )
        outs.append(dec.generate(PROMPTS, max_new_tokens=20))
        if toggles.step_graph:
            assert dec.info()["captured_keys"], dec.info()["keys"]
    assert outs[0] == outs[1]


def test_hf_greedy_agreement_with_generate():
    target, draft = models(torch.float32)
    dec = hf_spec_decoder(
        target, draft, max_requests=4, max_seq_len=96, config=RunnerConfig(toggles=Toggles.all(True), progress=False)
    )
    out = dec.generate(PROMPTS, max_new_tokens=20)
    for prompt, got in zip(PROMPTS, out):
        ids = torch.tensor([prompt], device="cuda")
        ref = target.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=20, do_sample=False, eos_token_id=None
        )
        assert got == ref[0, len(prompt) :].tolist()  # float32: token for token
