"""Token bans on the penalties' copy of the logits: min_tokens (transformers' min_new_tokens) and
no_repeat_ngram_size, each against transformers' processor; every verify row of the in-graph state banned
as its own tokens say; decoding that never stops before min_tokens and repeats no n-gram, greedy output
equal to a reference decode."""

import pytest
import torch

from stepgraph import SamplingParams
from stepgraph.examples.model import build
from stepgraph.speculative.decoder import SpecDecoder
from stepgraph.speculative.penalties import MAX_BANNED, PenaltyState, penalised_logits_ref
from tests.e2e.test_penalties import PROMPTS, odd_logits, reference_greedy


@pytest.fixture(autouse=True)
def _torch_paths(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")


def test_the_ban_is_transformers_min_new_tokens():
    transformers = pytest.importorskip("transformers")
    logits = odd_logits((2, 40), torch.float32)
    eos = [3, 17, 39]
    prompt, outputs = [5, 6, 7], ([], [1, 2, 3, 4])
    for min_new in (0, 3, 4, 5):
        proc = transformers.MinNewTokensLengthLogitsProcessor(len(prompt), min_new, eos)
        for output, row in zip(outputs, logits):
            ids = torch.tensor([prompt + output])
            hf = proc(ids, row[None].clone())[0]
            ref = penalised_logits_ref(row, prompt, output, SamplingParams(min_tokens=min_new), eos)
            torch.testing.assert_close(ref, hf, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("K", [0, 1, 3])
def test_each_verify_row_is_banned_while_its_token_would_come_too_early(K):
    """Requests at different distances from their min_tokens, with penalties too, in random slots and one
    padded row: row i equals the dense reference for output + drafts[:i], bit for bit."""
    V, L, B = 29, 30, 4
    g = torch.Generator().manual_seed(K)
    state = PenaltyState(rows=6, vocab_size=V, max_len=L, device="cpu")
    eos = (2, 11)
    cases = [
        (4, SamplingParams(min_tokens=3, repetition_penalty=1.3, presence_penalty=0.5)),
        (1, SamplingParams(min_tokens=5)),
        (-1, SamplingParams()),
        (0, SamplingParams(min_tokens=9)),
    ]
    requests = []
    for slot, params in cases:
        prompt = torch.randint(0, V, (5,), generator=g).tolist()
        output = [t for t in torch.randint(0, V, (4,), generator=g).tolist() if t not in eos] or [0]
        if slot >= 0:
            state.admit(slot, params, len(prompt), eos)
            state.write_prompt(
                torch.tensor([prompt]), torch.tensor([slot]), torch.tensor([0]), torch.tensor([len(prompt)])
            )
            state.record_first(slot, len(prompt), torch.tensor(output[:1]))
            for n, t in enumerate(output[1:]):
                state.record(torch.tensor([[t]]), torch.tensor([slot]), torch.tensor([len(prompt) + n]))
        requests.append((slot, prompt, output, params))
    drafts = torch.randint(0, V, (B, K), generator=g)
    drafts[:, 0::2] = eos[0]  # drafts that are EOS count as tokens before the next row
    seq_len = torch.tensor([len(p) + len(o) - 1 if s >= 0 else 0 for s, p, o, _ in requests])
    raw = odd_logits((B, K + 1, V), torch.float32, seed=K)
    out = state.apply(raw, drafts, torch.tensor([c[0] for c in cases]), seq_len)
    for b, (slot, prompt, output, params) in enumerate(requests):
        for i in range(K + 1):
            if slot < 0:
                want = raw[b, i].float()
            else:
                seen = output + drafts[b, :i].tolist()
                want = penalised_logits_ref(raw[b, i], prompt, seen, params, eos)
            torch.testing.assert_close(out[b, i], want, rtol=0, atol=0, equal_nan=True)
    assert (out[1, 0, list(eos)] == float("-inf")).all()  # at most 4 outputs of 5
    assert (out[3, :, list(eos)] == float("-inf")).all()  # at most 4 + 3 of 9: every row held back


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
@pytest.mark.parametrize("k", [0, 3])
@pytest.mark.parametrize("chunk", [None, 4], ids=["whole", "chunked"])
def test_greedy_never_stops_before_min_tokens_and_equals_the_reference(overlap, k, chunk):
    """EOS is each prompt's first free token, so without min_tokens every request stops at once."""
    target, draft = build("tiny")
    plain = SpecDecoder.for_example(target, draft, num_draft_tokens=k).generate(PROMPTS, max_new_tokens=1)
    eos = sorted({p[0] for p in plain})
    dec = SpecDecoder.for_example(
        target, draft, num_draft_tokens=k, max_batch=3, penalties=True, prefill_chunk=chunk, eos_token_id=eos
    )
    sampling = [SamplingParams(min_tokens=6), SamplingParams(), SamplingParams(min_tokens=9)]
    reqs = dec.make_requests(PROMPTS, 14, sampling)
    dec.serve(reqs, overlap=overlap)
    assert len(reqs[1].output) == 1 and reqs[1].finish_reason == "eos"  # no min_tokens: stops at once
    for prompt, r, params in zip(PROMPTS, reqs, sampling):
        assert r.output == reference_greedy(target, prompt, 14, params, eos)
        assert not set(r.output[: params.min_tokens]) & set(eos)
        assert len(r.output) > params.min_tokens or r.finish_reason == "length"


def test_sampled_requests_draw_no_eos_before_min_tokens():
    target, draft = build("tiny")
    free = SpecDecoder.for_example(target, draft).generate(PROMPTS[:2], max_new_tokens=12)
    eos = sorted(set(free[0] + free[1]))[:MAX_BANNED]  # ids the target likes to emit
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, penalties=True, eos_token_id=eos)
    for seed in range(4):
        params = SamplingParams(temperature=1.5, seed=seed, min_tokens=7)
        for out in dec.generate(PROMPTS, max_new_tokens=12, sampling=params):
            assert len(out) >= 7 and not set(out[:7]) & set(eos)


def test_min_tokens_refused_where_it_cannot_apply():
    target, draft = build("tiny")
    with pytest.raises(ValueError, match="min_tokens=3.*build it with penalties=True"):
        SpecDecoder.for_example(target, draft, eos_token_id=1).make_requests([[1, 2]], 4, SamplingParams(min_tokens=3))
    many = SpecDecoder.for_example(target, draft, penalties=True, eos_token_id=list(range(MAX_BANNED + 1)))
    with pytest.raises(ValueError, match=f"at most {MAX_BANNED} EOS and stop token ids"):
        many.make_requests([[1, 2]], 4, SamplingParams(min_tokens=3))
    many.make_requests([[1, 2]], 4, SamplingParams())  # without min_tokens any number of EOS ids is fine
    with pytest.raises(ValueError, match="min_tokens must be in"):
        SamplingParams(min_tokens=-1)
    with pytest.raises(TypeError, match="min_tokens must be an int"):
        SamplingParams(min_tokens=2.0)


def test_the_ngram_ban_is_transformers_no_repeat_ngram():
    transformers = pytest.importorskip("transformers")
    logits = odd_logits((1, 12), torch.float32)[0]
    for tokens in ([1, 2, 3, 1, 2], [4, 4, 4, 4], [1, 2, 1, 3, 1], [7]):
        for n in (1, 2, 3, 4, 6):
            hf = transformers.NoRepeatNGramLogitsProcessor(n)(torch.tensor([tokens]), logits[None].clone())[0]
            ref = penalised_logits_ref(logits, tokens[:1], tokens[1:], SamplingParams(no_repeat_ngram_size=n))
            torch.testing.assert_close(ref, hf, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
@pytest.mark.parametrize("k", [0, 3])
@pytest.mark.parametrize("chunk", [None, 4], ids=["whole", "chunked"])
def test_greedy_with_an_ngram_ban_equals_the_reference_and_repeats_no_ngram(overlap, k, chunk):
    """The tiny target's free decode falls into a cycle; with no_repeat_ngram_size it cannot."""
    target, draft = build("tiny")
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=k, max_batch=3, penalties=True, prefill_chunk=chunk)
    sampling = [SamplingParams(no_repeat_ngram_size=2), SamplingParams(), SamplingParams(no_repeat_ngram_size=3)]
    out = dec.generate(PROMPTS, max_new_tokens=24, sampling=sampling, overlap=overlap)
    free = SpecDecoder.for_example(target, draft, num_draft_tokens=k).generate(PROMPTS, max_new_tokens=24)
    assert out[1] == free[1]
    for prompt, tokens, params in zip(PROMPTS, out, sampling):
        assert tokens == reference_greedy(target, prompt, 24, params)
        n = params.no_repeat_ngram_size
        if n:
            seq = prompt + tokens
            grams = [tuple(seq[j : j + n]) for j in range(len(seq) - n + 1)]
            assert len(grams) == len(set(grams))
    assert out[0] != free[0] or out[2] != free[2]
