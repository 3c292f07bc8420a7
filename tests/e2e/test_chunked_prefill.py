"""Chunked prefill: long prompts go through in chunks between steps, the requests already decoding keep
stepping, and every request's greedy output is still the target's own."""

import random

import pytest

from stepgraph import SamplingParams, SpecDecoder
from stepgraph.examples.model import build, greedy_reference


@pytest.fixture(autouse=True)
def _torch_pieces(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")


def workload(n=8, seed=0):
    rng = random.Random(seed)
    prompts = [[rng.randrange(512) for _ in range(rng.randint(1, 70))] for _ in range(n)]
    return prompts, [rng.randint(5, 30) for _ in prompts]


@pytest.mark.parametrize("kv,chunk", [("rows", 7), ("paged", 1), ("paged", 16)])
@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
def test_greedy_output_is_the_targets_whatever_the_chunk(kv, chunk, overlap):
    target, draft = build("tiny", kv=kv, page_size=4, max_seq_len=128, residual_scale=1.0)
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, prefill_chunk=chunk)
    prompts, lengths = workload(4 if chunk == 1 else 8)  # a chunk of one position: a step per prompt token
    assert dec.generate(prompts, max_new_tokens=lengths, overlap=overlap) == [
        greedy_reference(target, p, n) for p, n in zip(prompts, lengths)
    ]
    assert dec.in_use == (0, 0)


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
def test_a_short_request_decodes_while_a_long_prompt_is_prefilled(overlap):
    target, draft = build("tiny", max_seq_len=128)
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, prefill_chunk=8)
    events = []
    long_prompt = list(range(1, 97))  # 12 chunks
    out = dec.generate([[5, 6, 7], long_prompt], max_new_tokens=[40, 4], overlap=overlap,
                       on_tokens=lambda i, t: events.append(i))  # fmt: skip
    first_long = events.index(1)
    assert events[:first_long].count(0) >= 5  # the short request stepped while the long one was prefilled
    assert out == [greedy_reference(target, [5, 6, 7], 40), greedy_reference(target, long_prompt, 4)]


def test_sampled_output_with_chunks_reproduces_under_a_seed():
    target, draft = build("tiny", max_seq_len=128)
    sp = SamplingParams(temperature=0.8, top_k=40, seed=9)
    prompts, lengths = workload(5, seed=2)
    runs = [
        SpecDecoder.for_example(target, draft, prefill_chunk=5).generate(prompts, max_new_tokens=lengths, sampling=sp)
        for _ in range(2)
    ]
    assert runs[0] == runs[1]


def test_a_bad_chunk_is_refused():
    target, draft = build("tiny")
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="prefill_chunk"):
            SpecDecoder.for_example(target, draft, prefill_chunk=bad)


def test_prompts_arriving_together_share_one_forward_of_the_budget():
    """Eight prompts at once with a budget of 16 positions: one forward of eight chunks of 2 first, then
    fewer and longer ones as prompts finish; every output still the target's greedy."""
    target, draft = build("tiny", max_seq_len=128, max_requests=8)
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=2, prefill_chunk=16)
    prompts, lengths = workload(8, seed=4)
    out = dec.generate(prompts, max_new_tokens=lengths)
    assert out == [greedy_reference(target, p, n) for p, n in zip(prompts, lengths)]
    runs = dec.chunk_forward.runner.counters.histogram  # forwards by number of chunks in them
    assert runs[8] >= 1 and set(runs) <= {1, 2, 4, 8}
    positions = sum(len(p) for p in prompts)
    assert sum(runs.values()) < positions / 4  # one chunk per forward would take 16 positions at a time
    assert dec.info()["prefill_chunks"]["runs"] == sum(runs.values())
    assert [dec.chunk_forward.width(n) for n in dec.chunk_forward.sizes] == [16, 8, 4, 2]


def test_no_forward_of_more_chunks_than_the_batch_can_prefill_is_made():
    """A decoder of at most 3 requests at once has chunk forwards of 1 and 2 (a forward of 4 or 8 could
    never fill); 3 prompts arriving together take one of each."""
    target, draft = build("tiny", max_seq_len=128, max_requests=4)
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=2, max_batch=3, prefill_chunk=16)
    assert dec.chunk_forward.sizes == (1, 2)
    prompts = [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8]]
    assert dec.generate(prompts, max_new_tokens=4) == [greedy_reference(target, p, 4) for p in prompts]
    assert dec.chunk_forward.runner.counters.histogram == {2: 1, 1: 1}


def test_the_first_tokens_logprobs_are_the_same_whole_or_in_chunks():
    target, draft = build("tiny", max_seq_len=128)
    prompts = [[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], [2, 7, 1, 8]]
    got = {}
    for chunk in (None, 4):
        dec = SpecDecoder.for_example(target, draft, logprobs=2, prefill_chunk=chunk)
        got[chunk] = [r.logprobs[0] for r in dec.serve(dec.make_requests(prompts, 3))]
    assert got[None] == pytest.approx(got[4], abs=1e-5)


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
def test_a_first_token_read_after_the_next_step_ends_its_request_as_read_at_once(overlap):
    """A chunked prompt's first token reaches the host after the step launched behind its forward. When that
    token is an EOS id, or all the request asked for, the request ends with it as a whole prompt's would:
    same output, finish reason and streamed tokens, its slot and cache row given back."""
    target, draft = build("tiny", max_seq_len=128)
    prompts, lengths = workload(6, seed=5)
    eos = greedy_reference(target, prompts[2], 1)[0]  # request 2 ends at its first token
    lengths[4] = 1
    runs = {}
    for chunk in (None, 8):
        dec = SpecDecoder.for_example(target, draft, num_draft_tokens=2, prefill_chunk=chunk, eos_token_id=eos)
        streamed = [[] for _ in prompts]
        requests = dec.make_requests(prompts, lengths)
        for r, s in zip(requests, streamed):
            r.on_tokens = s.extend
        done = dec.serve(requests, overlap=overlap)
        runs[chunk] = [(r.output, r.finish_reason) for r in done], streamed
        assert dec.in_use == (0, 0)
    assert runs[8] == runs[None]
    (outputs, streamed) = runs[8]
    assert outputs[2] == ([eos], "eos") and outputs[4][1] == "length" and len(outputs[4][0]) == 1
    assert streamed == [o for o, _ in outputs]
