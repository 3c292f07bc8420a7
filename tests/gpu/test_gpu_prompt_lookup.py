"""On the GPU: prompt lookup inside the step graph gives what the eager step gives, bit for bit, greedy
output equals the target's own decoding, and repetition is accepted; splicing too."""

import pytest
import torch

from stepgraph import RunnerConfig, SamplingParams, Toggles
from stepgraph.drafts import PromptLookupDraft
from stepgraph.examples.model import build, greedy_reference
from stepgraph.speculative.decoder import SpecDecoder
from tests.e2e.test_prompt_lookup import repetitive

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
@pytest.mark.parametrize("chunk", [None, 8], ids=["whole", "chunked"])
@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=0.8, top_p=0.9, seed=4)],
                         ids=["greedy", "sampled"])  # fmt: skip
def test_step_graph_with_prompt_lookup_equals_eager(overlap, chunk, sampling):
    target, _ = build("tiny", device="cuda", dtype=torch.bfloat16)
    prompts = repetitive(5, 4)
    got = []
    for toggles in (Toggles.all(True), Toggles(step_graph=False, prefill_graph=False)):
        dec = SpecDecoder.for_example(
            target, PromptLookupDraft.for_example(target), num_draft_tokens=4, max_batch=4, prefill_chunk=chunk,
            config=RunnerConfig(toggles=toggles, progress=False),
        )  # fmt: skip
        got.append(dec.generate(prompts, max_new_tokens=80, sampling=sampling, overlap=overlap))
        if toggles.step_graph:
            info = dec.info()
            assert info["captured_keys"] and info["eager_runs"] == 0
            accepted = dec.stats.mean_accept_len
        dec.release()
    assert got[0] == got[1]
    if sampling.temperature == 0:
        assert got[0] == [greedy_reference(target, p, 80) for p in prompts]
        assert accepted > 1.5


def test_spliced_step_with_prompt_lookup_equals_the_reference():
    target, _ = build("tiny", device="cuda")
    prompts = repetitive(9, 3)
    dec = SpecDecoder.for_example(target, PromptLookupDraft.for_example(target), num_draft_tokens=3, splice_stages=True)
    assert dec.generate(prompts, max_new_tokens=40) == [greedy_reference(target, p, 40) for p in prompts]
    assert dec.info()["captured_keys"]
