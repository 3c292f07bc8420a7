"""On the GPU: log-probabilities computed inside the step graph equal the eager step's bit for bit, and
the target's own log_softmax at every emitted token."""

import pytest
import torch

from stepgraph import RunnerConfig, SamplingParams, Toggles
from stepgraph.examples.model import build
from stepgraph.speculative.decoder import SpecDecoder
from tests.e2e.test_logprobs import PROMPTS, reference

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=0.8, top_k=40, seed=2)],
                         ids=["greedy", "sampled"])  # fmt: skip
def test_step_graph_logprobs_equal_eager_and_the_target(overlap, sampling):
    target, draft = build("tiny", device="cuda")
    got = []
    for toggles in (Toggles.all(True), Toggles(step_graph=False)):
        dec = SpecDecoder.for_example(
            target, draft, max_batch=3, logprobs=5, config=RunnerConfig(toggles=toggles, progress=False)
        )
        requests = dec.make_requests(PROMPTS, [9, 5, 12], sampling)
        dec.serve(requests, overlap=overlap)
        if toggles.step_graph:
            assert dec.info()["captured_keys"]
        got.append([(r.output, r.logprobs, r.top_logprobs) for r in requests])
        dec.release()
    assert got[0] == got[1]
    for prompt, (output, logprobs, tops) in zip(PROMPTS, got[0]):
        ref = reference(target, prompt, output)
        want = ref.gather(-1, torch.tensor(output, device="cuda")[:, None])[:, 0].cpu()
        torch.testing.assert_close(torch.tensor(logprobs), want, atol=1e-4, rtol=0)
        assert len(tops) == len(output) and all(len(t) == 5 for t in tops)
