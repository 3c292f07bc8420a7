"""Property-based tests: every kernel against its reference over random shapes and values."""

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stepgraph import SamplingParams
from stepgraph.copy_in import input_copy
from stepgraph.kernels import input_copy_ref
from stepgraph.kernels.draft_extend_tail import draft_extend_tail, draft_extend_tail_ref
from stepgraph.kernels.greedy_verify import greedy_chain_verify, greedy_chain_verify_ref
from stepgraph.kernels.penalties import BadWords, Bans, LogitBias, penalise_rows, penalise_rows_ref
from stepgraph.kernels.relay import relay_gather, relay_gather_ref, relay_store, relay_store_ref
from stepgraph.speculative.penalties import PenaltyState
from tests.conftest import HAS_CUDA

DEV = "cuda" if HAS_CUDA else "cpu"
SETTINGS = settings(
    max_examples=15 if not HAS_CUDA else 60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
SPECIAL = [0.0, -0.0, 1.0, float("inf"), float("-inf"), float("nan")]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def logits_strategy(draw, shape, dtype):
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    x = torch.randn(*shape, generator=g)
    if draw(st.booleans()):  # many ties: a few distinct values only
        x = torch.round(x)
    n_special = draw(st.integers(0, 4))
    flat = x.view(-1)
    for _ in range(n_special):
        flat[draw(st.integers(0, flat.numel() - 1))] = draw(st.sampled_from(SPECIAL))
    return x.to(dtype).to(DEV)


@SETTINGS
@given(
    st.data(),
    st.integers(1, 4),
    st.integers(0, 4),
    st.integers(1, 3000),
    st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
)
def test_greedy_verify_property(data, B, K, V, dtype):
    x = logits_strategy(data.draw, (B, K + 1, V), dtype)
    d = torch.argmax(x, -1)[:, :K].clone()
    if K and data.draw(st.booleans()):
        d[0, data.draw(st.integers(0, K - 1))] += 1
    got = greedy_chain_verify(x, d, with_select=True, with_emitted=True)
    ref = greedy_chain_verify_ref(x, d)
    for f in ("predict", "num_accepted", "bonus", "select", "emitted"):
        assert torch.equal(getattr(got, f), getattr(ref, f)), f


@SETTINGS
@given(st.data(), st.integers(1, 8), st.integers(1, 2100), st.integers(1, 70), st.integers(1, 4))
def test_tail_property(data, N, V, D, B):
    x = logits_strategy(data.draw, (N, V), torch.bfloat16)
    h = torch.randn(N, D, device=DEV)
    sel = torch.tensor([data.draw(st.integers(-2, N + 1)) for _ in range(B)], device=DEV)
    got, ref = draft_extend_tail(x, h, sel), draft_extend_tail_ref(x, h, sel)
    assert torch.equal(got.tokens, ref.tokens) and torch.equal(got.hidden, ref.hidden)


DT = st.sampled_from([torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.uint8, torch.float16, torch.int16])


@SETTINGS
@given(st.data(), st.lists(st.tuples(DT, st.integers(0, 9)), min_size=1, max_size=10), st.integers(1, 6))
def test_input_copy_property(data, fields, n):
    padded = n + data.draw(st.integers(0, 3))
    srcs = [(torch.rand(n, w) * 100).to(dt).to(DEV) if w else (torch.rand(n) * 100).to(dt).to(DEV) for dt, w in fields]
    dsts = [torch.zeros(padded + 1, *s.shape[1:], dtype=s.dtype, device=DEV) for s in srcs]
    ref = [d.clone() for d in dsts]
    pads = [data.draw(st.sampled_from([None, 0, 3])) for _ in fields]
    input_copy(srcs, dsts, n, padded, pads)
    input_copy_ref(srcs, ref, n, padded, pads)
    assert all(torch.equal(a, b) for a, b in zip(dsts, ref))


@SETTINGS
@given(st.data(), st.integers(2, 9), st.integers(1, 6))
def test_relay_property(data, S, B):
    B = min(B, S)
    perm = data.draw(st.permutations(list(range(S))))[:B]  # distinct slots, some replaced by padding (-1)
    slots = torch.tensor([-1 if data.draw(st.booleans()) else v for v in perm], device=DEV)
    fields = [torch.randn(S, 5, device=DEV), torch.arange(S, device=DEV)]
    srcs = [torch.randn(B, 5, device=DEV), torch.arange(B, device=DEV) + 50]
    a, b = [f.clone() for f in fields], [f.clone() for f in fields]
    relay_store(a, srcs, slots)
    relay_store_ref(b, srcs, slots)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    outs, refs = [torch.empty_like(s) for s in srcs], [torch.empty_like(s) for s in srcs]
    relay_gather(fields, outs, slots, [0.5, -1])
    relay_gather_ref(fields, refs, slots, [0.5, -1])
    assert all(torch.equal(x, y) for x, y in zip(outs, refs))


@SETTINGS
@given(st.data(), st.integers(1, 4), st.integers(0, 4), st.integers(2, 400), st.sampled_from(DTYPES))
def test_penalise_rows_property(data, B, K, V, dtype):
    """Penalties, logit biases (``-inf`` among them), allowed tokens, bad words, min_tokens and n-gram bans
    of random requests over a few ids (so that tokens repeat and words match), some rows later in their chain."""
    S, L = 6, data.draw(st.integers(1, 40))
    few = st.integers(0, min(V, data.draw(st.integers(1, 6))) - 1)
    state = PenaltyState(S, V, L, DEV)
    for slot in range(S - 1):
        bias = {data.draw(st.integers(0, V - 1)): data.draw(st.sampled_from([-2.5, 0.75, 30.0, float("-inf")]))
                for _ in range(data.draw(st.integers(0, 3)))}  # fmt: skip
        words = data.draw(st.lists(st.lists(few, min_size=1, max_size=4), max_size=4))
        allowed = data.draw(st.none() | st.lists(st.integers(0, V - 1), min_size=1, max_size=8))
        params = SamplingParams(
            repetition_penalty=data.draw(st.sampled_from([1.0, 0.7, 1.3])),
            presence_penalty=data.draw(st.sampled_from([0.0, -1.5, 0.5])),
            frequency_penalty=data.draw(st.sampled_from([0.0, 2.0, -0.25])),
            min_tokens=data.draw(st.integers(0, 3)),
            no_repeat_ngram_size=data.draw(st.integers(0, 3)),
            logit_bias=bias,
            bad_words_ids=words,
            allowed_token_ids=allowed,
        )
        state.admit(slot, params, data.draw(st.integers(0, L)), eos=data.draw(st.lists(few, max_size=2)))
        state.history[slot, :L] = torch.tensor(data.draw(st.lists(few, min_size=L, max_size=L)), dtype=torch.int32)
        state.counts[slot] = torch.randint(0, 3, (V,), generator=torch.Generator().manual_seed(slot))
    first_row = data.draw(st.integers(0, K))
    logits = logits_strategy(data.draw, (B, K + 1 - first_row, V), dtype)
    drafts = torch.tensor([data.draw(st.lists(few, min_size=K, max_size=K)) for _ in range(B)], device=DEV)
    slots = torch.tensor([data.draw(st.integers(-1, S - 2)) for _ in range(B)], device=DEV)
    seq_len = torch.tensor([data.draw(st.integers(0, L - 1)) for _ in range(B)], device=DEV)
    args = (logits, drafts.view(B, K), slots, seq_len, state.history, state.counts, state.settings, state.scratch)
    kw = {
        "bans": Bans(state.ban_until, state.banned, state.no_repeat),
        "first_row": first_row,
        "bias": LogitBias(state.bias_count, state.bias_ids, state.bias),
        "words": BadWords(state.word_count, state.words),
    }
    got, ref = penalise_rows(*args, **kw), penalise_rows_ref(*args, **kw)
    torch.testing.assert_close(got, ref, rtol=0, atol=0, equal_nan=True)
