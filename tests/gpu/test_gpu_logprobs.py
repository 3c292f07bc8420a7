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


@pytest.mark.parametrize("chunk", [None, 3], ids=["whole", "chunked"])
def test_prompt_logprobs_in_the_chunk_graph_equal_eager_and_the_target(chunk):
    """The chunk forward's graph scores each prompt position as its eager run does, bit for bit."""
    from tests.e2e.test_logprobs import prompt_reference

    target, draft = build("tiny", device="cuda")
    got = []
    for toggles in (Toggles.all(True), Toggles(step_graph=False, prefill_graph=False)):
        dec = SpecDecoder.for_example(target, draft, max_batch=3, prompt_logprobs=4, prefill_chunk=chunk,
                                      config=RunnerConfig(toggles=toggles, progress=False))  # fmt: skip
        requests = dec.make_requests(PROMPTS, [3, 2, 4])
        dec.serve(requests)
        if chunk is not None and toggles.step_graph:
            assert dec.info()["prefill_chunks"]["captured_keys"]
        got.append([(r.prompt_logprobs, r.prompt_top_logprobs) for r in requests])
        dec.release()
    assert got[0] == got[1]
    for prompt, (logprobs, tops) in zip(PROMPTS, got[0]):
        ref = prompt_reference(target, prompt)[:-1]
        want = ref.gather(-1, torch.tensor(prompt[1:], device="cuda")[:, None])[:, 0].cpu()
        torch.testing.assert_close(torch.tensor(logprobs[1:]), want, atol=1e-4, rtol=0)
        assert logprobs[0] is None and all(len(t) == 4 for t in tops[1:])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_the_kernel_equals_its_reference_at_a_full_vocabulary(dtype):
    """Qwen3's vocabulary, 32 verify rows: ids exactly, scores within one float32 step; with ties at the
    20th value and a row of fewer finite entries than 20."""
    from tests.kernels.test_logprobs import check

    torch.manual_seed(3)
    x = torch.randn(8, 4, 151936, device="cuda") * 2
    x[0, 1, 10:] = float("-inf")  # 10 finite entries: ten -inf alternatives, lowest ids first
    x[0, 1, :7] = 1.0
    x[1, 0] = torch.round(x[1, 0])  # ties by the thousand
    tokens = torch.randint(-1, 151936, (8, 4), device="cuda")
    check(x.to(dtype), tokens, 20)
    check(x.to(dtype), tokens, 0)
