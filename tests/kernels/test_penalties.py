"""The penalty kernels against their torch references, bit for bit: odd vocabularies, every dtype, NaN,
-inf and ties in the logits, repeated tokens in histories and drafts, padded rows, lengths 0 and max."""

from dataclasses import replace

import pytest
import torch

from stepgraph import SamplingParams
from stepgraph.kernels._common import use_triton
from stepgraph.kernels.penalties import (
    COPY_BLOCK,
    DENSE,
    BadWords,
    Bans,
    LogitBias,
    penalise_rows,
    penalise_rows_ref,
    record_tokens,
    record_tokens_ref,
)
from stepgraph.speculative.penalties import PenaltyState
from tests.conftest import HAS_CUDA
from tests.e2e.test_penalties import odd_logits

DEV = "cuda" if HAS_CUDA else "cpu"


def state(S, V, L, seed):
    g = torch.Generator().manual_seed(seed)
    history = torch.randint(0, min(V, 13), (S, L + 1), generator=g, dtype=torch.int32)
    counts = torch.randint(0, 3, (S, V), generator=g, dtype=torch.int32)
    settings = torch.stack([torch.rand(S, generator=g) + 0.5, torch.rand(S, generator=g) * 4 - 2,
                            torch.rand(S, generator=g) * 4 - 2], 1)  # fmt: skip
    history[-1], counts[-1], settings[-1] = 0, 0, torch.tensor([1.0, 0.0, 0.0])  # the scratch row
    return [t.to(DEV) for t in (history, counts, settings)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("B,K,V,L", [(1, 0, 7, 5), (3, 3, 301, 300), (4, 5, 1000, 17)])
def test_penalise_rows_equals_its_reference(B, K, V, L, dtype):
    S = 6
    history, counts, settings = state(S, V, L, seed=K)
    g = torch.Generator().manual_seed(B)
    logits = odd_logits((B, K + 1, V), dtype, seed=B).to(DEV)
    drafts = torch.randint(0, min(V, 13), (B, K), generator=g).to(DEV)
    slots = torch.tensor([4, -1, 0, 2][:B], device=DEV)
    seq_len = torch.tensor([L - 1, 0, 0, L // 2][:B], device=DEV)  # the longest, a padded row, length 1
    got = penalise_rows(logits, drafts, slots, seq_len, history, counts, settings, S - 1)
    want = penalise_rows_ref(logits, drafts, slots, seq_len, history, counts, settings, S - 1)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    assert got.dtype == torch.float32 and got.data_ptr() != logits.data_ptr()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("B,K,V,L", [(1, 0, 7, 5), (4, 3, 301, 40)])
def test_the_min_tokens_ban_equals_its_reference(B, K, V, L, dtype):
    """Banned ids among the history's and the drafts' tokens, rows either side of each slot's limit, an id
    banned twice, a slot without a ban and a padded row."""
    S = 6
    history, counts, settings = state(S, V, L, seed=K + 7)
    g = torch.Generator().manual_seed(B + 3)
    logits = odd_logits((B, K + 1, V), dtype, seed=B + 1).to(DEV)
    drafts = torch.randint(0, min(V, 13), (B, K), generator=g).to(DEV)
    slots = torch.tensor([4, -1, 0, 2][:B], device=DEV)
    seq_len = torch.tensor([L // 2, 0, 3, L - 1][:B], device=DEV)
    until = torch.tensor([0, 0, 6, 0, L // 2 + 3, 0], dtype=torch.int32, device=DEV)  # slot 2: no ban
    banned = torch.full((S, 8), -1, dtype=torch.int32, device=DEV)
    banned[4, :3] = torch.tensor([1, 5, 1])  # ids the history (tokens < 13) and the drafts hold
    banned[0, :2] = torch.tensor([V - 1, 2])
    bans = Bans(until, banned, torch.zeros(S, dtype=torch.int32, device=DEV))
    got = penalise_rows(logits, drafts, slots, seq_len, history, counts, settings, S - 1, bans=bans)
    want = penalise_rows_ref(logits, drafts, slots, seq_len, history, counts, settings, S - 1, bans=bans)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    assert (want[0, :2, [1, 5]] == float("-inf")).all()  # positions L//2 + 1, + 2 come before L//2 + 3
    if K:
        assert not (want[0, 2:, [1, 5]] == float("-inf")).all()  # from position L//2 + 3 on, free


@pytest.mark.parametrize("K", [0, 1, 4])
@pytest.mark.parametrize("n", [1, 2, 3, 6])
def test_the_ngram_ban_equals_its_reference(n, K):
    """Histories over few ids (n-grams repeat), drafts that continue them, a row too short for n, a padded
    row, a slot without the ban, and a longer history than one block."""
    S, V, L = 6, 37, 300
    history, counts, settings = state(S, V, L, seed=n + 11)
    history[:, :] = torch.randint(0, 4, (S, L + 1), generator=torch.Generator().manual_seed(n)).to(history)
    g = torch.Generator().manual_seed(K + 5)
    B = 4
    logits = odd_logits((B, K + 1, V), torch.float32, seed=n).to(DEV)
    drafts = torch.randint(0, 4, (B, K), generator=g).to(DEV)
    slots = torch.tensor([4, -1, 0, 2], device=DEV)
    seq_len = torch.tensor([L - 1, 0, 0, 40], device=DEV)  # slot 0 has one token: too short for n >= 3
    no_repeat = torch.tensor([n, 0, n, 0, n, 0], dtype=torch.int32, device=DEV)  # slot 2: off
    bans = Bans(torch.zeros(S, dtype=torch.int32, device=DEV), torch.full((S, 8), -1, dtype=torch.int32, device=DEV),
                no_repeat)  # fmt: skip
    got = penalise_rows(logits, drafts, slots, seq_len, history, counts, settings, S - 1, bans=bans)
    want = penalise_rows_ref(logits, drafts, slots, seq_len, history, counts, settings, S - 1, bans=bans)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    if n <= 3:
        assert (want[0, 0, :4] == float("-inf")).any()  # 300 tokens over 4 ids: short n-grams repeat


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("first_row,R", [(1, 1), (2, 2), (1, 4)])
def test_rows_later_in_the_chain_equal_those_rows_of_the_whole_chain(first_row, R, dtype):
    """A draft's rows continue a chain: ``first_row = i`` penalises input row ``r`` as chain row ``i + r``,
    with the drafts before it and its position's bans. So rows ``i..`` of the whole chain, penalised from
    ``i`` on, equal those rows penalised with the whole chain, in the kernel and in the reference, with the
    min_tokens ban and the n-gram ban on."""
    S, V, L, B = 6, 301, 40, 4
    K = first_row + R - 1  # drafts the last row follows
    history, counts, settings = state(S, V, L, seed=first_row + 20)
    history[:, :] = torch.randint(0, 5, (S, L + 1), generator=torch.Generator().manual_seed(R)).to(history)
    g = torch.Generator().manual_seed(first_row)
    logits = odd_logits((B, K + 1, V), dtype, seed=R).to(DEV)
    drafts = torch.randint(0, 5, (B, K), generator=g).to(DEV)
    slots = torch.tensor([4, -1, 0, 2], device=DEV)
    seq_len = torch.tensor([L // 2, 0, 3, L - 1], device=DEV)
    until = torch.tensor([0, 0, 0, 0, L // 2 + 3, 0], dtype=torch.int32, device=DEV)  # the ban ends mid-chain
    banned = torch.full((S, 8), -1, dtype=torch.int32, device=DEV)
    banned[4, :2] = torch.tensor([1, 3])
    bans = Bans(until, banned, torch.tensor([2, 0, 1, 3, 2, 0], dtype=torch.int32, device=DEV))
    args = (slots, seq_len, history, counts, settings, S - 1)
    whole = penalise_rows(logits, drafts, *args, bans=bans)
    later = logits[:, first_row:].contiguous()
    got = penalise_rows(later, drafts, *args, bans=bans, first_row=first_row)
    want = penalise_rows_ref(later, drafts, *args, bans=bans, first_row=first_row)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(got, whole[:, first_row:], rtol=0, atol=0, equal_nan=True)
    as_first = penalise_rows(later, drafts, *args, bans=bans)  # the same rows as the chain's first ones
    assert not torch.equal(torch.nan_to_num(as_first), torch.nan_to_num(got))  # where a row stands matters


def admitted(S, V, per_slot: dict[int, SamplingParams]) -> PenaltyState:
    """A state whose rows hold these settings, as a decoder's admissions write them."""
    state = PenaltyState(S, V, 4, DEV)
    for slot, params in per_slot.items():
        state.admit(slot, params)
    return state


def logit_bias(S, V, per_slot: dict[int, dict[int, float]]) -> LogitBias:
    state = admitted(S, V, {slot: SamplingParams(logit_bias=bias) for slot, bias in per_slot.items()})
    return LogitBias(state.bias_count, state.bias_ids, state.bias)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("K", [0, 3])
def test_the_logit_bias_equals_its_reference(K, dtype):
    """Biases on tokens the history and drafts hold (then penalised) and on others, -inf (a ban) among
    them, more biased tokens than one block in a slot, a slot without, a padded row, bans on too; every
    unbiased, unseen logit is the raw one, and every biased, unseen one the raw one plus its bias."""
    S, V, L, B = 6, 301, 40, 4
    history, counts, settings = state(S, V, L, seed=K + 30)
    g = torch.Generator().manual_seed(K + 1)
    logits = odd_logits((B, K + 1, V), dtype, seed=K + 2).to(DEV)
    drafts = torch.randint(0, 13, (B, K), generator=g).to(DEV)
    drafts[0, :1] = 14  # only among the drafts: biased, then penalised from row 1 on
    slots = torch.tensor([4, -1, 0, 2], device=DEV)
    seq_len = torch.tensor([L // 2, 0, 3, L - 1], device=DEV)
    many = {t: float(torch.randn(1, generator=g)) * 5 for t in range(V - 280, V)}  # 280 > one block
    seen_one = int(history[4, 0])  # in slot 4's history (ids below 13): biased, then penalised
    bias = logit_bias(
        S, V, {4: {seen_one: 2.5, 13: float("-inf"), 14: 1.5, 150: -3.25, 200: 4.0, V - 2: 1e30}, 0: many, 3: {7: 9.0}}
    )
    bans = Bans(torch.tensor([0, 0, 0, 0, L // 2 + 2, 0], dtype=torch.int32, device=DEV),
                torch.full((S, 8), -1, dtype=torch.int32, device=DEV), torch.tensor([0, 0, 2, 0, 0, 0],
                dtype=torch.int32, device=DEV))  # fmt: skip
    bans.banned[4, 0] = 200  # biased and banned
    args = (logits, drafts, slots, seq_len, history, counts, settings, S - 1)
    got = penalise_rows(*args, bans=bans, bias=bias)
    want = penalise_rows_ref(*args, bans=bans, bias=bias)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    plain = penalise_rows_ref(*args, bans=bans)
    raw = logits.float()
    unseen = [150, V - 2]
    assert torch.equal(want[0, :, unseen], raw[0, :, unseen] + torch.tensor([-3.25, 1e30], device=DEV))
    assert (want[0, :, 13] == float("-inf")).all() and want[0, 0, 200] == float("-inf")  # banned at row 0
    assert want[0, 0, seen_one] != plain[0, 0, seen_one]
    others = [t for t in range(V) if t not in {seen_one, 13, 14, 150, 200, V - 2}]
    torch.testing.assert_close(want[0, :, others], plain[0, :, others], rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(want[1], plain[1], rtol=0, atol=0, equal_nan=True)  # padded: the scratch row
    assert not torch.equal(torch.nan_to_num(want[2]), torch.nan_to_num(plain[2]))


@pytest.mark.parametrize("V", [COPY_BLOCK + 301, 301, 97])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("K", [0, 3])
def test_allowed_token_ids_equal_their_reference(K, dtype, V):
    """Dense bias rows (``allowed_token_ids``) over more than one block of the copy, and short rows that
    share a block (4 a block, or 16: with K = 0 the block is part empty): allowed tokens seen (then
    penalised), biased, banned by min_tokens, or only among the drafts; a biased token that is not allowed;
    beside a slot with a listed bias, one without, and a padded row. Every token not allowed is -inf (NaN
    where its logit is NaN, as a bias of -inf gives)."""
    S, L, B = 6, 30, 4
    history, counts, settings = state(S, V, L, seed=K + 50)
    g = torch.Generator().manual_seed(K + 5)
    logits = odd_logits((B, K + 1, V), dtype, seed=K + 6).to(DEV)
    drafts = torch.randint(0, 13, (B, K), generator=g).to(DEV)
    drafts[0, :1] = V - 3  # allowed, only among the drafts
    slots = torch.tensor([4, -1, 0, 2], device=DEV)
    seq_len = torch.tensor([L // 2, 0, 3, L - 1], device=DEV)
    seen = sorted(set(history[4, :3].tolist()))
    far = min(COPY_BLOCK + 7, V - 5)  # past the first block where rows are long
    allowed = [*seen, 5, 17, far, V - 3, V - 1]
    per_slot = {
        4: SamplingParams(allowed_token_ids=allowed, logit_bias={17: 2.5, 18: 4.0, seen[0]: -1.0}),
        0: SamplingParams(logit_bias={7: 9.0}),
        2: SamplingParams(allowed_token_ids=range(0, V, 3)),
    }
    st = admitted(S, V, per_slot)
    bias = LogitBias(st.bias_count, st.bias_ids, st.bias)
    bans = Bans(
        torch.tensor([0, 0, 0, 0, L + 9, 0], dtype=torch.int32, device=DEV),
        torch.full((S, 8), -1, dtype=torch.int32, device=DEV),
        torch.zeros(S, dtype=torch.int32, device=DEV),
    )
    bans.banned[4, 0] = V - 1  # min_tokens holds back an allowed token
    args = (logits, drafts, slots, seq_len, history, counts, settings, S - 1)
    got = penalise_rows(*args, bans=bans, bias=bias)
    want = penalise_rows_ref(*args, bans=bans, bias=bias)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    raw = logits.float()
    others = torch.ones(V, dtype=torch.bool)
    others[allowed] = False
    finite_or_ninf = ~(raw[0][:, others].isnan() | (raw[0][:, others] == float("inf")))  # else NaN
    assert torch.equal(want[0][:, others] == float("-inf"), finite_or_ninf)
    assert (want[0, :, V - 1] == float("-inf")).all()  # allowed, and banned
    exact = {"rtol": 0, "atol": 0, "equal_nan": True}
    torch.testing.assert_close(want[0, :, far], raw[0, :, far], **exact)  # allowed, unseen, unbiased
    torch.testing.assert_close(want[0, :, 17], raw[0, :, 17] + 2.5, **exact)
    last = V - 1 - (V - 1) % 3  # the last token slot 2 allows
    assert (want[3, :, 1] == float("-inf")).all()
    torch.testing.assert_close(want[3, :, last], raw[3, :, last], **exact)
    torch.testing.assert_close(want[1], raw[1], rtol=0, atol=0, equal_nan=True)  # padded: the scratch row
    assert bias.count.tolist() == [1, 0, DENSE, 0, DENSE, 0]


@pytest.mark.parametrize("V", [COPY_BLOCK + 301, 97])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_selected_rows_equal_those_of_all_rows_and_the_others_are_left_alone(dtype, V, monkeypatch):
    """A draft-extend's rows (``first_row = 1``, K + 1 of them a request) with one selected a request, as
    its tail reads the accepted row: each selected row is, bit for bit, that row penalised with all the
    others; the kernels write no other row (the allocation's NaN stays), and a request whose selection is
    out of range (a padded one) gets none. Repetition, frequency and presence penalties, logit biases,
    allowed tokens, the n-gram ban and bad words, over long rows (more than one block of the copy) and
    short ones."""
    S, B, K = 6, 4, 3
    st = admitted(S, V, {
        4: SamplingParams(repetition_penalty=1.3, logit_bias={3: 2.0, V - 2: -1.0}, no_repeat_ngram_size=2),
        0: SamplingParams(allowed_token_ids=[*range(9), V - 1], frequency_penalty=0.5),
        2: SamplingParams(bad_words_ids=[[1, 2], [5]], presence_penalty=-1.0),
    })  # fmt: skip
    g = torch.Generator().manual_seed(V)
    st.history.copy_(torch.randint(0, 9, st.history.shape, generator=g))
    st.counts.copy_(torch.randint(0, 3, st.counts.shape, generator=g))
    logits = odd_logits((B, K + 1, V), dtype, seed=V).to(DEV)
    extend = torch.randint(0, 9, (B, K + 1), generator=g).to(DEV)
    slots = torch.tensor([4, -1, 0, 2], device=DEV)
    seq_len = torch.tensor([2, 0, 1, 3], device=DEV)
    select = torch.arange(B, device=DEV) * (K + 1) + torch.tensor([2, 0, K, 0], device=DEV)  # accepted rows
    select[1] = B * (K + 1)  # the padded request: out of range
    whole = st.apply(logits, extend, slots, seq_len, 1).view(B * (K + 1), V)
    empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: empty(*a, **k).fill_(float("nan")))
    got = st.apply(logits, extend, slots, seq_len, 1, select).view(B * (K + 1), V)
    monkeypatch.undo()
    chosen = [0 * (K + 1) + 2, 2 * (K + 1) + K, 3 * (K + 1)]
    torch.testing.assert_close(got[chosen], whole[chosen], rtol=0, atol=0, equal_nan=True)
    others = [r for r in range(B * (K + 1)) if r not in chosen]
    if use_triton(logits):  # (the torch reference penalises every row)
        assert got[others].isnan().all()
    assert not torch.equal(torch.nan_to_num(whole[chosen]), torch.nan_to_num(logits.view(-1, V)[chosen].float()))


@pytest.mark.parametrize("first_row,R", [(0, 1), (0, 4), (2, 2)])
def test_bad_words_equal_their_reference(first_row, R):
    """Words that end each slot's history (one to six tokens), words whose prefix runs into the drafts, a
    word longer than a short row's tokens, single tokens, a slot without words, a padded row; with the
    n-gram ban and a logit bias on too (every write before the bans)."""
    S, V, L, B = 6, 37, 60, 4
    K = first_row + R - 1
    history, counts, settings = state(S, V, L, seed=R + 40)
    history[:, :] = torch.randint(0, 5, (S, L + 1), generator=torch.Generator().manual_seed(first_row)).to(history)
    g = torch.Generator().manual_seed(R)
    logits = odd_logits((B, R, V), torch.float32, seed=first_row + 3).to(DEV)
    drafts = torch.randint(0, 5, (B, K), generator=g).to(DEV)
    drafts[0, :1] = 5  # no history holds it
    slots = torch.tensor([4, -1, 0, 2], device=DEV)
    seq_len = torch.tensor([L // 2, 0, 0, L - 1], device=DEV)
    tail = history[4, : L // 2 + 1].tolist()
    words = {
        4: [tail[len(tail) - n :] + [30 + n] for n in range(0, 6)] + [[tail[-1], 5, 36]] + [[7], [8, 9]],
        0: [[history[0, 0].item(), 20], [1, 2, 3, 21], [22]],  # slot 0 holds one token
        2: [history[2, L - 3 : L].tolist() + [23]],
    }
    st = admitted(S, V, {s: SamplingParams(bad_words_ids=w, logit_bias={31: 2.0}) for s, w in words.items()})
    bad = BadWords(st.word_count, st.words)
    bias = LogitBias(st.bias_count, st.bias_ids, st.bias)
    bans = Bans(torch.zeros(S, dtype=torch.int32, device=DEV), torch.full((S, 8), -1, dtype=torch.int32, device=DEV),
                torch.tensor([2, 0, 0, 0, 3, 0], dtype=torch.int32, device=DEV))  # fmt: skip
    args = (logits, drafts, slots, seq_len, history, counts, settings, S - 1)
    kw = {"bans": bans, "first_row": first_row, "bias": bias}
    got = penalise_rows(*args, **kw, words=bad)
    want = penalise_rows_ref(*args, **kw, words=bad)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    plain = penalise_rows_ref(*args, **kw)
    if first_row == 0:  # row 0 follows the history: every word ending it is banned, none other
        assert (want[0, 0, [30, 31, 32, 33, 34, 35, 7]] == float("-inf")).all()
        hit = ~torch.isclose(torch.nan_to_num(want[0, 0]), torch.nan_to_num(plain[0, 0]), rtol=0, atol=0)
        assert set(hit.nonzero().view(-1).tolist()) <= {30, 31, 32, 33, 34, 35, 7}
        assert want[2, 0, 22] == float("-inf") and plain[2, 0, 22] != float("-inf")
    if first_row == 0 and R > 1:  # chain row 1's tokens end with the history's last and the first draft
        assert want[0, 1, 36] == float("-inf") and plain[0, 1, 36] != float("-inf")


def test_record_tokens_equals_its_reference():
    S, V, L = 5, 50, 12
    history, counts, _ = state(S, V, L, seed=1)
    tokens = torch.tensor([[3, 3, 7, -1], [1, 2, 3, 4], [9, -1, -1, -1]], device=DEV)
    slots = torch.tensor([0, -1, 2], device=DEV)
    seq_len = torch.tensor([2, 0, L - 2], device=DEV)  # the last row: only its first token fits
    outs = []
    for record in (record_tokens, record_tokens_ref):
        h, c = history.clone(), counts.clone()
        record(tokens, slots, seq_len, h, c, S - 1)
        outs.append((h[:, :L], c))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    assert outs[0][0][0, 3:6].tolist() == [3, 3, 7] and outs[0][1][0, 3] == counts[0, 3] + 2


def test_strided_lengths_and_slots_are_read_by_their_strides():
    """The step hands ``positions[:, 0]`` (a column of ``[B, K + 1]``) as the lengths: with two requests the
    kernel read the second one's length from the first one's next position."""
    S, V, L = 5, 50, 20
    history, counts, settings = state(S, V, L, seed=2)
    tokens = torch.tensor([[21 % V, 32, 16, -1], [24, -1, -1, -1]], device=DEV)
    positions = torch.tensor([[7, 8, 9, 10], [6, 7, 8, 9]], device=DEV)
    slots = torch.tensor([[1, 9], [2, 9]], device=DEV)[:, 0]
    outs = []
    for record in (record_tokens, record_tokens_ref):
        h, c = history.clone(), counts.clone()
        record(tokens, slots, positions[:, 0], h, c, S - 1)
        outs.append((h[:, :L], c))
    assert torch.equal(outs[0][0], outs[1][0]) and outs[0][0][2, 7] == 24
    logits = odd_logits((2, 4, V), torch.float32).to(DEV)
    drafts = tokens[:, :3].clamp(min=0)
    got = penalise_rows(logits, drafts, slots, positions[:, 0], history, counts, settings, S - 1)
    want = penalise_rows_ref(logits, drafts, slots, positions[:, 0], history, counts, settings, S - 1)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def test_greedy_decode_through_the_kernels_equals_the_reference():
    """The step with every kernel (Triton's interpreter on the CPU): greedy with penalties, an n-gram ban, a
    logit bias and bad words, allowed tokens, K = 3, long enough for every request's history to matter (a
    later request's once went astray)."""
    from stepgraph.examples.model import build
    from stepgraph.speculative.decoder import SpecDecoder
    from tests.e2e.test_penalties import PENALISED, PROMPTS, reference_greedy

    target, draft = build("tiny", device=DEV)
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, max_batch=3, penalties=True)
    sampling = [PENALISED[0], SamplingParams(no_repeat_ngram_size=2, logit_bias={17: float("-inf"), 300: 2.0},
                                               bad_words_ids=[[7, 300], [300, 300, 5], [1]]),
                replace(PENALISED[2], allowed_token_ids=range(1, 512, 2))]  # fmt: skip
    out = dec.generate(PROMPTS, max_new_tokens=16, sampling=sampling)
    assert all(t % 2 for t in out[2])
    for prompt, tokens, params in zip(PROMPTS, out, sampling):
        assert tokens == reference_greedy(target, prompt, 16, params)
