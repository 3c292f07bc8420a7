"""min_tokens (Hugging Face's min_new_tokens): the definition against transformers' processor, every verify
row of the in-graph state banned while its token would come too early, and decoding that never stops before
min_tokens, greedy output equal to a reference decode with EOS held back."""

import pytest
import torch

from stepgraph import SamplingParams
from stepgraph.examples.model import build
from stepgraph.speculative.decoder import SpecDecoder
from stepgraph.speculative.penalties import MAX_BANNED, PenaltyState, penalised_logits_ref
from tests.e2e.test_penalties import PROMPTS, odd_logits

NEUTRAL = (1.0, 0.0, 0.0)


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
            ref = penalised_logits_ref(row, prompt, output, NEUTRAL, min_tokens=min_new, eos=eos)
            torch.testing.assert_close(ref, hf, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("K", [0, 1, 3])
def test_each_verify_row_is_banned_while_its_token_would_come_too_early(K):
    """Requests at different distances from their min_tokens, with penalties too, in random slots and one
    padded row: row i equals the dense reference for output + drafts[:i], bit for bit."""
    V, L, B = 29, 30, 4
    g = torch.Generator().manual_seed(K)
    state = PenaltyState(rows=6, vocab_size=V, max_len=L, device="cpu")
    eos = (2, 11)
    cases = [(4, 3, (1.3, 0.5, 0.0)), (1, 5, NEUTRAL), (-1, 0, NEUTRAL), (0, 9, NEUTRAL)]  # slot, min_tokens
    requests = []
    for slot, min_tokens, settings in cases:
        prompt = torch.randint(0, V, (5,), generator=g).tolist()
        output = [t for t in torch.randint(0, V, (4,), generator=g).tolist() if t not in eos] or [0]
        if slot >= 0:
            state.admit(slot, settings, len(prompt), min_tokens, eos)
            state.write_prompt(
                torch.tensor([prompt]), torch.tensor([slot]), torch.tensor([0]), torch.tensor([len(prompt)])
            )
            state.record_first(slot, len(prompt), torch.tensor(output[:1]))
            for n, t in enumerate(output[1:]):
                state.record(torch.tensor([[t]]), torch.tensor([slot]), torch.tensor([len(prompt) + n]))
        requests.append((slot, prompt, output, settings, min_tokens))
    drafts = torch.randint(0, V, (B, K), generator=g)
    drafts[:, 0::2] = eos[0]  # drafts that are EOS count as tokens before the next row
    seq_len = torch.tensor([len(p) + len(o) - 1 if s >= 0 else 0 for s, p, o, _, _ in requests])
    raw = odd_logits((B, K + 1, V), torch.float32, seed=K)
    out = state.apply(raw, drafts, torch.tensor([c[0] for c in cases]), seq_len)
    for b, (slot, prompt, output, settings, min_tokens) in enumerate(requests):
        for i in range(K + 1):
            if slot < 0:
                want = raw[b, i].float()
            else:
                seen = output + drafts[b, :i].tolist()
                want = penalised_logits_ref(raw[b, i], prompt, seen, settings, min_tokens=min_tokens, eos=eos)
            torch.testing.assert_close(out[b, i], want, rtol=0, atol=0, equal_nan=True)
    assert (out[1, 0, list(eos)] == float("-inf")).all()  # at most 4 outputs of 5
    assert (out[3, :, list(eos)] == float("-inf")).all()  # at most 4 + 3 of 9: every row held back


def reference_greedy(target, prompt, n, min_tokens, eos):
    """Greedy decoding with EOS held back for the first ``min_tokens`` (whole forwards, no cache), stopping
    after an EOS."""
    dev, out = target.device, []
    rows = torch.tensor([target.cfg.max_requests - 1], device=dev)
    while len(out) < n and not (out and out[-1] in eos):
        seq = torch.tensor([prompt + out], device=dev)
        logits, _ = target(seq, torch.arange(seq.shape[1], device=dev)[None], rows)
        row = penalised_logits_ref(logits[0, -1], prompt, out, NEUTRAL, min_tokens=min_tokens, eos=eos)
        out.append(int(torch.argmax(row)))
    return out


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
        assert r.output == reference_greedy(target, prompt, 14, params.min_tokens, eos)
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
    with pytest.raises(ValueError, match="min_tokens=3.*build the decoder with penalties=True"):
        SpecDecoder.for_example(target, draft, eos_token_id=1).make_requests([[1, 2]], 4, SamplingParams(min_tokens=3))
    many = SpecDecoder.for_example(target, draft, penalties=True, eos_token_id=list(range(MAX_BANNED + 1)))
    with pytest.raises(ValueError, match=f"at most {MAX_BANNED} EOS ids"):
        many.make_requests([[1, 2]], 4, SamplingParams(min_tokens=3))
    many.make_requests([[1, 2]], 4, SamplingParams())  # without min_tokens any number of EOS ids is fine
    with pytest.raises(ValueError, match="min_tokens must be in"):
        SamplingParams(min_tokens=-1)
    with pytest.raises(TypeError, match="min_tokens must be an int"):
        SamplingParams(min_tokens=2.0)
