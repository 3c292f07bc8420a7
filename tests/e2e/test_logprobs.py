"""Log-probabilities of the emitted tokens (and the top alternatives), computed in the step: equal to the
target's own log_softmax at each emitted token, for accepted drafts, bonus and prefill tokens alike."""

import pytest
import torch

from stepgraph import SamplingParams
from stepgraph.examples.model import build
from stepgraph.speculative.decoder import SpecDecoder
from stepgraph.speculative.scores import token_scores

PROMPTS = [[5, 17, 99, 3], [42, 7], [1, 2, 3, 4, 5, 6, 7]]


@pytest.fixture(autouse=True)
def _torch_paths(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")


def reference(target, prompt, output):
    """log_softmax of the target's logits over prompt + output (one forward, a fresh cache row)."""
    dev = target.device
    seq = torch.tensor([prompt + output[:-1]], device=dev)
    rows = torch.tensor([target.cfg.max_requests - 1], device=dev)
    logits, _ = target(seq, torch.arange(seq.shape[1], device=dev)[None], rows)
    return torch.log_softmax(logits[0, len(prompt) - 1 :].float(), -1)  # [len(output), V]


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
@pytest.mark.parametrize("k", [0, 3])
@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=0.8, top_p=0.9, seed=3)],
                         ids=["greedy", "sampled"])  # fmt: skip
def test_each_tokens_logprob_is_the_targets(overlap, k, sampling):
    target, draft = build("tiny")
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=k, max_batch=2, logprobs=4)
    requests = dec.make_requests(PROMPTS, [9, 5, 12], sampling)
    dec.serve(requests, overlap=overlap)
    for r in requests:
        ref = reference(target, r.prompt, r.output)
        assert len(r.logprobs) == len(r.top_logprobs) == len(r.output)
        want = ref.gather(-1, torch.tensor(r.output)[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(r.logprobs), want, rtol=0, atol=2e-5)
        values, ids = ref.topk(4, -1)
        assert [[t for t, _ in top] for top in r.top_logprobs] == ids.tolist()
        torch.testing.assert_close(torch.tensor([[v for _, v in top] for top in r.top_logprobs]), values, atol=2e-5,
                                   rtol=0)  # fmt: skip
        if sampling.temperature == 0:
            assert [top[0][0] for top in r.top_logprobs] == r.output  # greedy: the token is the most probable


def test_no_logprobs_unless_asked_and_bad_counts_refused():
    target, draft = build("tiny")
    dec = SpecDecoder.for_example(target, draft)
    (r,) = dec.serve(dec.make_requests([PROMPTS[0]], 6))
    assert r.logprobs == [] and r.top_logprobs == [] and len(r.output) == 6
    for bad in (-1, 21, 2.5, True):
        with pytest.raises(ValueError, match="logprobs must be None or the number of alternatives"):
            SpecDecoder.for_example(target, draft, logprobs=bad)


def prompt_reference(target, prompt):
    """log_softmax of the target's logits over ``prompt`` (one forward, a fresh cache row): ``[L, V]``."""
    dev = target.device
    rows = torch.tensor([target.cfg.max_requests - 1], device=dev)
    logits, _ = target(torch.tensor([prompt], device=dev), torch.arange(len(prompt), device=dev)[None], rows)
    return torch.log_softmax(logits[0].float(), -1)


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
@pytest.mark.parametrize("chunk", [None, 3, 8], ids=["whole", "chunked", "one-chunk"])
def test_each_prompt_tokens_logprob_is_the_targets(overlap, chunk):
    """prompt_logprobs: every prompt token after the first scored under the raw logits before it, with
    its alternatives; the first is None. Chunks of 3 split the prompts (several requests a forward, a chunk
    ending a prompt, a one-token prompt); chunks of 8 hold each whole; a penalised, sampled request's
    prompt scores stay the raw ones."""
    target, draft = build("tiny")
    prompts = [*PROMPTS, [9]]
    dec = SpecDecoder.for_example(
        target, draft, max_batch=4, prompt_logprobs=3, prefill_chunk=chunk, penalties=True, logprobs=1
    )
    params = [SamplingParams(), SamplingParams(temperature=0.9, seed=1, repetition_penalty=1.5), SamplingParams(),
              SamplingParams()]  # fmt: skip
    requests = dec.make_requests(prompts, [4, 3, 1, 2], params)
    dec.serve(requests, overlap=overlap)
    assert dec.info()["prompt_logprobs"] == 3
    for r in requests:
        assert len(r.prompt_logprobs) == len(r.prompt_top_logprobs) == len(r.prompt)
        assert r.prompt_logprobs[0] is None and r.prompt_top_logprobs[0] is None
        assert len(r.logprobs) == len(r.output)  # the emitted tokens' too
        if len(r.prompt) == 1:
            continue
        ref = prompt_reference(target, r.prompt)[:-1]
        want = ref.gather(-1, torch.tensor(r.prompt[1:])[:, None])[:, 0]
        torch.testing.assert_close(torch.tensor(r.prompt_logprobs[1:]), want, rtol=0, atol=2e-5)
        values, ids = ref.topk(3, -1)
        assert [[t for t, _ in top] for top in r.prompt_top_logprobs[1:]] == ids.tolist()
        got = torch.tensor([[v for _, v in top] for top in r.prompt_top_logprobs[1:]])
        torch.testing.assert_close(got, values, atol=2e-5, rtol=0)


def test_prompt_logprobs_only_when_asked_and_bad_counts_refused():
    target, draft = build("tiny")
    (r,) = SpecDecoder.for_example(target, draft, prefill_chunk=4).serve(
        SpecDecoder.for_example(target, draft).make_requests([PROMPTS[2]], 2)
    )
    assert r.prompt_logprobs == [] and r.prompt_top_logprobs == []
    for bad in (-1, 21, 2.5, True):
        with pytest.raises(ValueError, match="prompt_logprobs must be None or the number of alternatives"):
            SpecDecoder.for_example(target, draft, prompt_logprobs=bad)
    dec = SpecDecoder.for_example(target, draft, prompt_logprobs=0)
    (r,) = dec.serve(dec.make_requests([PROMPTS[0]], 2))
    assert len(r.prompt_logprobs) == 4 and r.prompt_top_logprobs == [None, [], [], []]


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
@pytest.mark.parametrize("chunk", [None, 3], ids=["whole", "chunked"])
def test_each_request_keeps_its_own_number_of_alternatives(overlap, chunk):
    """SamplingParams(logprobs=n, prompt_logprobs=m): the request keeps its tokens' and its prompt's scores
    with its own n and m alternatives, the first of the decoder's, same tokens, same values; None takes the
    decoder's numbers (written into its params)."""
    target, draft = build("tiny")
    dec = SpecDecoder.for_example(target, draft, max_batch=3, logprobs=4, prompt_logprobs=3, prefill_chunk=chunk)
    own = [
        SamplingParams(),
        SamplingParams(logprobs=0, prompt_logprobs=1),
        SamplingParams(logprobs=2, prompt_logprobs=0),
    ]
    alike = dec.serve(dec.make_requests(PROMPTS, [6, 5, 7]), overlap=overlap)
    requests = dec.serve(dec.make_requests(PROMPTS, [6, 5, 7], own), overlap=overlap)
    assert [(r.params.logprobs, r.params.prompt_logprobs) for r in requests] == [(4, 3), (0, 1), (2, 0)]
    for r, full in zip(requests, alike):
        n, m = r.params.logprobs, r.params.prompt_logprobs
        assert r.output == full.output and r.logprobs == full.logprobs and r.prompt_logprobs == full.prompt_logprobs
        assert r.top_logprobs == [top[:n] for top in full.top_logprobs]
        assert r.prompt_top_logprobs == [None] + [top[:m] for top in full.prompt_top_logprobs[1:]]
        assert all(len(top) == n for top in r.top_logprobs) and all(len(t) == m for t in r.prompt_top_logprobs[1:])


def test_a_request_asking_more_alternatives_than_the_decoder_computes_is_refused():
    target, draft = build("tiny")
    dec = SpecDecoder.for_example(target, draft, logprobs=2)
    with pytest.raises(ValueError, match="sets logprobs=3, but the decoder computes 2 alternatives a token; build it "
                       "with logprobs=3 or more"):  # fmt: skip
        dec.make_requests([PROMPTS[0]], 4, SamplingParams(logprobs=3))
    with pytest.raises(ValueError, match="sets prompt_logprobs=0, but the decoder computes none; build it with "
                       "prompt_logprobs=0 or more"):  # fmt: skip
        dec.make_requests([PROMPTS[0]], 4, SamplingParams(prompt_logprobs=0))
    (r,) = dec.make_requests([PROMPTS[0]], 4, SamplingParams(logprobs=2))
    assert r.params.prompt_logprobs is None
    for bad in (-1, 21, 2.5, True):
        with pytest.raises(
            ValueError, match="logprobs must be None .the decoder's. or a number of alternatives, 0..20"
        ):
            SamplingParams(logprobs=bad)
        with pytest.raises(ValueError, match="prompt_logprobs must be None .the decoder's. or a number"):
            SamplingParams(prompt_logprobs=bad)


def test_zero_alternatives_and_the_cut_at_eos():
    """logprobs=0: each token's own only; tokens past an EOS in a step are not kept, nor are their scores."""
    target, draft = build("tiny")
    free = SpecDecoder.for_example(target, draft).generate([PROMPTS[0]], max_new_tokens=10)[0]
    dec = SpecDecoder.for_example(target, draft, logprobs=0, eos_token_id=free[4])
    (r,) = dec.serve(dec.make_requests([PROMPTS[0]], 10))
    assert r.output == free[: free.index(free[4]) + 1] and r.finish_reason == "eos"
    assert len(r.logprobs) == len(r.output) and r.top_logprobs == [[] for _ in r.output]


def test_token_scores_on_odd_rows():
    """-inf entries, a -1 token, bfloat16 logits: each score is log_softmax's, in float32."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 2, 37, generator=g)
    logits[0, 0, :30] = float("-inf")
    tokens = torch.tensor([[31, -1], [0, 36], [5, 5]])
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = logits.to(dtype)
        s = token_scores(x, tokens, 3)
        ref = torch.log_softmax(x.float(), -1)
        torch.testing.assert_close(
            s.logprobs[tokens >= 0], ref.gather(-1, tokens.clamp_min(0)[..., None])[..., 0][tokens >= 0]
        )
        torch.testing.assert_close(s.top_logprobs, ref.topk(3, -1).values)
        assert s.logprobs.dtype == torch.float32 and s.top_ids.dtype == torch.int64


def processed_reference(target, prompt, output, params):
    """The processed log-probabilities over prompt + output: the target's logits at each position
    penalised with the tokens before it, over the temperature, with the kept set, renormalised."""
    from stepgraph.kernels.chain_sampling_ref import kept_mask
    from stepgraph.speculative.penalties import penalised_logits_ref

    dev = target.device
    seq = torch.tensor([prompt + output[:-1]], device=dev)
    rows = torch.tensor([target.cfg.max_requests - 1], device=dev)
    logits, _ = target(seq, torch.arange(seq.shape[1], device=dev)[None], rows)
    x = torch.stack(
        [penalised_logits_ref(row, prompt, output[:i], params) for i, row in enumerate(logits[0, len(prompt) - 1 :])]
    )  # [len(output), V]
    if params.temperature == 0:
        return torch.log_softmax(x, -1)
    n = len(output)
    settings = [torch.tensor([v] * n) for v in (params.temperature, params.top_k, params.top_p, params.min_p)]
    keep = kept_mask(x[:, None], *settings)[:, 0]
    return torch.log_softmax(torch.where(keep, x / params.temperature, float("-inf")), -1)


@pytest.mark.parametrize("chunk", [None, 3], ids=["whole", "chunked"])
@pytest.mark.parametrize(
    "params",
    [SamplingParams(repetition_penalty=1.5), SamplingParams(temperature=0.7, top_k=6, seed=5, presence_penalty=0.5),
     SamplingParams(temperature=1.3, top_p=0.8, min_p=0.05, seed=6)],
    ids=["greedy", "top-k", "top-p"],
)  # fmt: skip
def test_processed_logprobs_are_the_distribution_each_token_was_drawn_from(params, chunk):
    target, draft = build("tiny")
    dec = SpecDecoder.for_example(
        target, draft, num_draft_tokens=3, max_batch=2, logprobs=8, logprobs_mode="processed", penalties=True,
        prefill_chunk=chunk,
    )  # fmt: skip
    assert dec.info()["logprobs_mode"] == "processed"
    requests = dec.make_requests(PROMPTS, [9, 5, 12], [params, SamplingParams(), params])  # greedy batch mates
    dec.serve(requests)
    for r in requests:
        ref = processed_reference(target, r.prompt, r.output, r.params)
        want = ref.gather(-1, torch.tensor(r.output)[:, None])[:, 0]
        assert torch.isfinite(want).all()  # every token drawn from inside its kept set
        torch.testing.assert_close(torch.tensor(r.logprobs), want, rtol=0, atol=2e-5)
        got_top = torch.tensor([[v for _, v in top] for top in r.top_logprobs])
        torch.testing.assert_close(got_top, ref.topk(8, -1).values, rtol=0, atol=2e-5)
        if r.params.top_k == 6:
            assert torch.isinf(got_top[:, 6:]).all()  # outside the top 6: -inf


def test_a_logprobs_mode_other_than_raw_or_processed_is_refused():
    target, draft = build("tiny")
    with pytest.raises(ValueError, match="logprobs_mode must be 'raw' or 'processed'"):
        SpecDecoder.for_example(target, draft, logprobs=1, logprobs_mode="logits")


def test_processed_logprobs_of_a_temperature_only_request_are_its_tempered_distribution():
    target, draft = build("tiny")
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=2, max_batch=2, logprobs=3, logprobs_mode="processed")
    sp = SamplingParams(temperature=0.5, seed=4)  # the temperature class: no kept set to sort
    (r,) = dec.serve(dec.make_requests([PROMPTS[0]], 8, sp))
    ref = torch.log_softmax(reference(target, r.prompt, r.output) / 0.5, -1)  # log_softmax(x) / T, renormalised
    want = ref.gather(-1, torch.tensor(r.output)[:, None])[:, 0]
    torch.testing.assert_close(torch.tensor(r.logprobs), want, rtol=0, atol=2e-5)
