"""The ``top_p`` class: pivot requests (top-p on, top-k off) draw a token per row by a rising pivot, small top-k
requests find their cut inside its rounds; kernels against the reference."""

import pytest
import torch
import triton
import triton.language as tl

from stepgraph.kernels import _sampling_mass, _sampling_pivot, _sampling_topk, chain_sampling_ref
from stepgraph.kernels._sampling_filter import key_floor
from stepgraph.kernels._sampling_mass import filtered_mass
from stepgraph.kernels._sampling_pivot import pivot_buffers
from stepgraph.kernels.chain_sampling import (
    chain_verify_sampling,
    chain_verify_sampling_ref,
    filter_cut_keys,
    split_layout,
)
from stepgraph.kernels.chain_sampling_ref import (
    filter_cut_keys_ref,
    kept_mask,
    late_pivot_requests,
    pivot_draws,
    pivot_requests,
    sortable_keys,
)
from tests.conftest import HAS_CUDA

DEV = "cuda" if HAS_CUDA else "cpu"


def verify_both(logits, drafts, T, k, p, mp, seed, offset, pivot=True, late=True):
    got = chain_verify_sampling(logits, drafts, T, k, p, seed, offset.clone(), min_p=mp, pivot=pivot, late=late)
    ref = chain_verify_sampling_ref(logits, drafts, T, k, p, seed, offset.clone(), min_p=mp, pivot=pivot)
    return got.tokens, ref.tokens


@triton.jit
def _floor_kernel(lo_ptr, out_ptr, n, SHIFT: tl.constexpr):
    i = tl.program_id(0) * 1024 + tl.arange(0, 1024)
    tl.store(out_ptr + i, key_floor(tl.load(lo_ptr + i, mask=i < n), SHIFT), mask=i < n)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_key_floor_is_the_float_compare_of_the_key_compare(dtype):
    """The draws' passes test ``x >= key_floor(lo)`` where the kernels' order is ``key(x) >= lo``: the same for
    every value a regular row can hold (every bfloat16 and float16, float32 samples with their neighbours,
    ±0, subnormals, ±max, -inf) and every ``lo``: each key of them, one above, the extremes of int64."""
    g = torch.Generator().manual_seed(0)
    if dtype == torch.float32:
        bits = torch.randint(-(2**31), 2**31, (4000,), generator=g, dtype=torch.int64)
        bits = torch.cat([bits, bits + 1, bits - 1, torch.tensor([0, 1, 2**31 - 1, -(2**31), -(2**31) + 1])])
        x = bits.to(torch.int32).view(torch.float32)
    else:
        x = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype).float()
    x = torch.cat([x, torch.tensor([0.0, -0.0, float("-inf"), torch.finfo(dtype).max, -torch.finfo(dtype).max])])
    x = x[~torch.isnan(x) & (x != float("inf"))].to(dtype)
    key = sortable_keys(x)
    lo = torch.unique(torch.cat([key, key + 1, torch.tensor([-(2**62), -(2**31) - 5, 2**31 + 5, 2**62])]))
    shift = 16 if dtype == torch.bfloat16 else 0
    floor = torch.empty(lo.numel(), dtype=torch.float32, device=DEV)
    _floor_kernel[(triton.cdiv(lo.numel(), 1024),)](lo.to(DEV), floor, lo.numel(), SHIFT=shift)
    floor = floor.cpu()
    # both tests keep, of the rising lo, those up to a point: the same ones when they keep as many for each x
    assert (floor[1:] >= floor[:-1]).all()  # (NaN fails it too)
    by_key = torch.searchsorted(lo, key, right=True)  # the lo with lo <= key(x)
    by_float = torch.searchsorted(floor, x.float(), right=True)  # those with floor(lo) <= x
    assert torch.equal(by_key, by_float), x[by_key != by_float][:5].tolist()


@pytest.mark.parametrize(  # float32 (32-bit keys, as float16) in the slow run: half a minute in the interpreter
    "dtype,V", [(torch.bfloat16, 2000), (torch.float16, 777), pytest.param(torch.float32, 1031, marks=pytest.mark.slow)]
)
def test_pivot_rows_draw_the_references_tokens(dtype, V):
    """Pivot requests among others in the filtered class: ties, a NaN row, -inf entries, min-p, a top-k
    above 1024 without top-p (of V or more where V is smaller) and with it (late requests: of V, and of 1030,
    below V but for float16, with min-p; at V = 777 a top-k of V is a small one), drafts that match and drafts that do not; two offsets.
    Without ``pivot`` (bf16, at the first offset) every row takes its cut, and the other requests' tokens are
    the same either way."""
    g = torch.Generator().manual_seed(0)
    B, K = 8, 3
    x = (torch.randn(B, K + 1, V, generator=g) * 2).round(decimals=1)
    x[1, 2] = float("nan")  # a degenerate row in a pivot request: its argmax
    x[7, 0, 5] = float("nan")  # and in a late one: its argmax, which is its draft
    x[2, :, : V // 3] = float("-inf")
    x = x.to(dtype).to(DEV)
    drafts = torch.argmax(x.float(), -1)[:, :K].contiguous()
    drafts[3, 0] = (drafts[3, 0] + 1) % V
    T = torch.tensor([0.8, 1.0, 0.6, 0.9, 0.7, 0.0, 1.2, 0.9], device=DEV)
    k = torch.tensor([0, 0, 0, 0, V, 50, 1500, 1030], device=DEV)
    p = torch.tensor([0.9, 0.5, 0.95, 0.3, 0.9, 0.9, 1.0, 0.8], device=DEV)
    mp = torch.tensor([0.0, 0.0, 0.05, 0.0, 0.0, 0.0, 0.0, 0.01], device=DEV)
    large = V > 1024  # a top-k of V: a small one at V = 777
    assert pivot_requests(T, k, p).tolist() == [True, True, True, True, large, False, True, True]
    assert late_pivot_requests(T, k, p).tolist() == [False] * 4 + [large, False, False, True]
    seed = torch.arange(B, dtype=torch.int64, device=DEV) + 3
    for step in range(2):
        off = torch.full((B,), step, dtype=torch.int64, device=DEV)
        got, ref = verify_both(x, drafts, T, k, p, mp, seed, off)
        assert torch.equal(got, ref), (step, got.tolist(), ref.tolist())
        if step == 0 and dtype == torch.bfloat16:
            cut, cut_ref = verify_both(x, drafts, T, k, p, mp, seed, off, pivot=False)
            assert torch.equal(cut, cut_ref), (cut.tolist(), cut_ref.tolist())
            assert torch.equal(cut[5], got[5])


class _CountedLaunches:
    """A kernel whose launches (``kernel[grid](...)``) are counted."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, 0

    def __getitem__(self, grid):
        self.launches += 1
        return self.kernel[grid]


@pytest.mark.parametrize("dtype", [torch.bfloat16, pytest.param(torch.float32, marks=pytest.mark.slow)])
def test_a_batch_without_late_requests_draws_in_four_launches_of_the_rounds(dtype, monkeypatch):
    """With ``late=False`` (the ``top_p`` class) the rounds are the draws' four launches, not the search's 8
    (bfloat16) or 16, and every request gets the reference's tokens: top-p alone, with min-p (its first draw in the
    rounds), a top-k above 1024 without top-p, small top-k rows (their cut in the same launches), min-p alone,
    greedy, a NaN row; two offsets, and the rows that still draw after a second launch on alone. Late requests break
    the promise: their rows draw by the pivot from the whole row, with top-k and top-p each over the whole
    distribution (the reference's draws of requests that are not late), not top-p within the top-k set."""
    g = torch.Generator().manual_seed(3)
    B, K, V = 8, 2, 1500
    x = (torch.randn(B, K + 1, V, generator=g) * 2).round(decimals=1)
    x[1, 1] = float("nan")
    x[2, :, : V // 4] = float("-inf")
    x = x.to(dtype).to(DEV)
    drafts = torch.argmax(x.float(), -1)[:, :K].contiguous()
    T = torch.tensor([0.8, 1.0, 0.7, 0.9, 0.6, 1.1, 0.0, 0.9], device=DEV)
    k = torch.tensor([0, 0, 0, 1200, 40, 0, 0, 0], device=DEV)
    p = torch.tensor([0.9, 0.6, 0.8, 1.0, 0.9, 1.0, 0.9, 0.2], device=DEV)
    mp = torch.tensor([0.0, 0.0, 0.05, 0.0, 0.0, 0.1, 0.0, 0.0], device=DEV)
    assert not late_pivot_requests(T, k, p).any()
    rounds = _CountedLaunches(_sampling_mass._round_kernel)
    monkeypatch.setattr(_sampling_mass, "_round_kernel", rounds)
    seed = torch.arange(B, dtype=torch.int64, device=DEV) + 11
    for step in range(2):
        off = torch.full((B,), step, dtype=torch.int64, device=DEV)
        got = chain_verify_sampling(x, drafts, T, k, p, seed, off.clone(), min_p=mp, pivot=True, late=False)
        ref = chain_verify_sampling_ref(x, drafts, T, k, p, seed, off.clone(), min_p=mp, pivot=True)
        assert torch.equal(got.tokens, ref.tokens), (step, got.tokens.tolist(), ref.tokens.tolist())
    assert rounds.launches == 2 * _sampling_pivot.DRAW_LAUNCHES == 8
    with monkeypatch.context() as scoped:
        scoped.setattr(_sampling_pivot, "STEPS", 2)  # draws in two launches: rows needing a second attempt go alone
        got = chain_verify_sampling(x, drafts, T, k, p, seed, off.clone(), min_p=mp, pivot=True, late=False)
        assert torch.equal(got.tokens, ref.tokens), (got.tokens.tolist(), ref.tokens.tolist())
    x[1, 1] = x[1, 0]  # no NaN row now
    k, p, T = torch.full_like(k, 1100), torch.full_like(p, 0.2), torch.ones_like(T)  # every request late
    monkeypatch.setattr(
        chain_sampling_ref, "late_pivot_requests", lambda t, k, p: torch.zeros_like(k, dtype=torch.bool)
    )
    off = torch.zeros(B, dtype=torch.int64, device=DEV)
    y = pivot_draws(*(v.cpu() for v in (x, T, k, p, mp, seed, off))).to(DEV)  # the pivot's draws, none late
    got = chain_verify_sampling(x, y[:, :K].contiguous(), T, k, p, seed, off, min_p=mp, pivot=True, late=False)
    assert torch.equal(got.tokens, y), (got.tokens.tolist(), y.tolist())


@pytest.mark.parametrize("dtype", [torch.bfloat16, pytest.param(torch.float32, marks=pytest.mark.slow)])
def test_the_rounds_of_a_batch_with_late_requests_end_with_the_late_rows_steps(dtype, monkeypatch):
    """With late requests the rounds end after the late rows' steps (their start, where the top-k cut is known:
    launch 3 over 16-bit keys, 7 over 32-bit ones, then ``LATE_STEPS`` launches; the draws' launches without
    late requests at least, five here), not at the end of the search's schedule (8 or 16 launches). Rows that
    reject draw after draw (a small top-p over flat rows, half of them late) get the reference's tokens
    whether the late rows go on alone from their second step, their third or their fourth, beside rows of
    top-p alone (their four turns, then one or more that do both)."""
    g = torch.Generator().manual_seed(4)
    B, K, V = 4, 1, 2500
    x = (torch.randn(B, K + 1, V, generator=g) * 0.5).to(dtype).to(DEV)
    drafts = torch.zeros(B, K, dtype=torch.int64, device=DEV)
    T = torch.ones(B, device=DEV)
    k = torch.tensor([1100, 0, 1300, 0], device=DEV)
    p = torch.full((B,), 0.1, device=DEV)
    mp = torch.zeros(B, device=DEV)
    assert late_pivot_requests(T, k, p).tolist() == [True, False, True, False]
    seed, off = torch.arange(B, dtype=torch.int64, device=DEV), torch.zeros(B, dtype=torch.int64, device=DEV)
    start = 3 if dtype == torch.bfloat16 else 7
    monkeypatch.setattr(_sampling_pivot, "DRAW_LAUNCHES", 5)  # below start + steps: the late rows' steps end it
    rounds = _CountedLaunches(_sampling_mass._round_kernel)
    monkeypatch.setattr(_sampling_mass, "_round_kernel", rounds)
    for steps in (2, 3, 4):
        monkeypatch.setattr(_sampling_pivot, "LATE_STEPS", steps)
        rounds.launches = 0
        got, ref = verify_both(x, drafts, T, k, p, mp, seed, off)
        assert torch.equal(got, ref), (steps, got.tolist(), ref.tolist())
        assert rounds.launches == max(start + steps, _sampling_pivot.DRAW_LAUNCHES), steps
    monkeypatch.setattr(chain_sampling_ref, "PIVOT_ROUNDS", 2)
    two = pivot_draws(*(v.cpu() for v in (x, T, k, p, mp, seed, off)))
    assert (two == torch.argmax(x.cpu().float(), -1))[0::2].any()  # late rows needing a third draw


@pytest.mark.parametrize(  # half a minute each in the interpreter: bf16 in the suite, the others in the slow run
    "dtype", [torch.bfloat16, *(pytest.param(d, marks=pytest.mark.slow) for d in (torch.float16, torch.float32))]
)
def test_late_rows_draw_from_the_cut_their_first_count_in_the_stats_launch_starts(dtype):
    """Late rows whose top-k binds (flat rows, a top-p near 1): the stats launch counts their entries over 16
    buckets of every key and the rounds narrow from there to the top-k cut, which the kernels report; each
    row's first draw is from the keys at or above it (inverse CDF), so a cut off by a key changes the
    tokens too. Ties at the cut (+0.0 and -0.0, one key) and a row of negative logits (its cut below zero)
    included."""
    g = torch.Generator().manual_seed(2)
    B, K, V = 6, 1, 2500
    x = torch.randn(B, K + 1, V, generator=g) * 0.3
    x[0] = x[0].round(decimals=1)  # ties
    x[1] = -x[1].abs() - 1.0
    x = x.to(dtype).to(DEV)
    drafts = torch.argmax(x.float(), -1)[:, :K].contiguous()
    T = torch.ones(B, device=DEV)
    k = torch.tensor([1350, 1500, 2000, 1025, 2499, 1300], device=DEV)  # row 0: ~1110 above zero, ~170 +0.0
    p = torch.full((B,), 0.999, device=DEV)
    assert late_pivot_requests(T, k, p).all()
    top_k_cut = filter_cut_keys_ref(x, T, k, torch.ones_like(p))
    assert torch.equal(filter_cut_keys(x, T, k, p, pivot=True), top_k_cut)
    seed = torch.arange(B, dtype=torch.int64, device=DEV) + 11
    for step in range(2):
        off = torch.full((B,), step, dtype=torch.int64, device=DEV)
        got, ref = verify_both(x, drafts, T, k, p, torch.zeros(B, device=DEV), seed, off)
        assert torch.equal(got, ref), (step, got.tolist(), ref.tolist())


@pytest.mark.parametrize(  # some rows fit (both paths) and no pool in the suite; the others in the slow run
    "pool,splits",
    [
        pytest.param(_sampling_pivot.POOL, 8, id="every-row", marks=pytest.mark.slow),
        pytest.param(130, 8, id="some-rows"),
        pytest.param(1, 8, id="none-fits", marks=pytest.mark.slow),
        pytest.param(_sampling_pivot.POOL, 2, id="no-pool"),
    ],
)
def test_late_rows_draw_to_the_end_from_the_pool_their_last_count_lists(pool, splits, monkeypatch, request):
    """The last count of a late row's top-k search, over 16 keys, lists every entry at or above them (every
    warp of a split its quarter, in vocabulary order): the top-k set and a few more. A row whose regions
    hold all of them checks and redraws from there to the end in the next launch: a small top-p over flat
    rows rejects attempt after attempt (up to three), and the rows run out at a bound of 2 attempts. With regions of 130 entries
    some rows have a fuller one, with regions of one entry none fits, and with more splits than the pool
    serves (three here) no row has a pool: they check their draws by passes in the launches after. The last
    request's top entries lie between 2 and 6, 256 bfloat16 keys above a bucket of the first count: its
    search ends before the last count, and its start lists its top-k set instead. Tokens agree with the reference either way (the drafts are its draws, so every
    row's is emitted)."""
    monkeypatch.setattr(_sampling_pivot, "POOL", pool)
    monkeypatch.setattr(_sampling_pivot, "POOL_SPLITS", splits)
    g = torch.Generator().manual_seed(1)
    B, K, V = 4, 1, 2500
    x = torch.randn(B, K + 1, V, generator=g) * 0.5
    x[3, :, :2100] = 2.0 + 4.0 * torch.rand(K + 1, 2100, generator=g)  # its search ends before the last count
    x = x.bfloat16().to(DEV)
    T = torch.ones(B, device=DEV)
    k = torch.tensor([1100, 1300, 1050, 2000], device=DEV)
    p = torch.tensor([0.02, 0.05, 0.03, 0.01], device=DEV)
    mp = torch.tensor([0.0, 0.01, 0.0, 0.0], device=DEV)
    assert late_pivot_requests(T, k, p).all()
    seed, off = torch.arange(B, device=DEV) + 5, torch.zeros(B, dtype=torch.int64, device=DEV)
    rows = B * (K + 1)
    n_splits, split = split_layout(rows, V)
    workspace = pivot_buffers(rows, n_splits, split, DEV)
    stats = [torch.empty((rows, n_splits), dtype=dt, device=DEV) for dt in (torch.float32,) * 2 + (torch.int32,) * 2]
    filtered_mass(x, x[:, :K, 0].long(), T, k, p, mp, (n_splits, split), *stats, pivot=(seed, off, *workspace))
    listed = workspace[-1][..., :4].reshape(rows, -1)
    fits = (listed <= pool).all(-1) & (splits >= n_splits)
    counts = {"every-row": (rows,), "some-rows": tuple(range(1, rows)), "none-fits": (0,), "no-pool": (0,)}
    assert int(fits.sum()) in counts[request.node.callspec.id]
    keys = sortable_keys(x).view(rows, V)
    cut = filter_cut_keys_ref(x, T, k, torch.ones_like(p)).view(rows, 1)
    for r in fits.nonzero().flatten().tolist():  # vocabulary order: index high, float32 bits low
        entries = torch.cat([region[4 + w * pool :][: int(region[w])] for region in workspace[-1][r] for w in range(4)])
        lowest = keys[r, entries >> 32].min()
        assert lowest <= cut[r] < lowest + 16  # the 16 keys of the last count, or fewer
        assert torch.equal(entries >> 32, (keys[r] >= lowest).nonzero().flatten())
        assert torch.equal((entries & 0xFFFFFFFF).int().view(torch.float32), x.view(rows, V)[r, entries >> 32].float())
    for bound in (chain_sampling_ref.PIVOT_ROUNDS, 2):
        for module in (_sampling_pivot, chain_sampling_ref):
            monkeypatch.setattr(module, "PIVOT_ROUNDS", bound)
        y = pivot_draws(x.cpu(), T.cpu(), k.cpu(), p.cpu(), mp.cpu(), seed.cpu(), off.cpu()).to(DEV)
        got, ref = verify_both(x, y[:, :K].contiguous(), T, k, p, mp, seed, off)
        assert torch.equal(got, ref) and torch.equal(ref, y), (bound, got.tolist(), ref.tolist())
    assert (y == torch.argmax(x.float(), -1)).any()  # some rows ran out of attempts


@pytest.mark.slow  # every schedule of draws in the interpreter: close to a minute
def test_many_draws_in_the_launches_and_alone_and_the_bound_on_them(monkeypatch):
    """A small top-p over flat rows rejects attempt after attempt (these rows take 1 to 4). They agree with
    the reference under the module's settings (the first attempt in the stats launch, the others in launches
    of the rounds), and when the rows go on alone in the last launch: from the third attempt (a launch of
    masses, one that checks and draws, then one that does both) or from the second (a launch of masses,
    then one that checks and draws). Past the bound on attempts both take the row's argmax, whether a launch
    that draws, one that does both, or the lone pass reaches it. Half the rows have min-p (which keeps all
    their entries): they make their first attempt in the rounds. Half are late (a top-k of 1100 with the
    top-p): they draw from their top-k cut in the rounds' second half. The others, without them, also in the
    draws' four launches (``late=False``)."""
    g = torch.Generator().manual_seed(1)
    B, K, V = 8, 1, 2500
    x = (torch.randn(B, K + 1, V, generator=g) * 0.5).bfloat16().to(DEV)
    drafts = torch.zeros(B, K, dtype=torch.int64, device=DEV)
    T = torch.ones(B, device=DEV)
    k = torch.tensor([0, 0, 1100, 1100] * (B // 4), device=DEV)
    p = torch.full((B,), 0.01, device=DEV)
    mp = torch.tensor([0.0, 0.01] * (B // 2), device=DEV)  # min-p rows make each attempt a step later
    assert late_pivot_requests(T, k, p).tolist() == [False, False, True, True] * (B // 4)
    seed = torch.arange(B, dtype=torch.int64, device=DEV)
    off = torch.zeros(B, dtype=torch.int64, device=DEV)
    y = pivot_draws(x.cpu(), T.cpu(), k.cpu(), p.cpu(), mp.cpu(), seed.cpu(), off.cpu())
    assert kept_mask(x.cpu(), T.cpu(), k.cpu(), p.cpu()).gather(-1, y[..., None]).all()  # every draw is kept
    module = (_sampling_pivot.STEPS, _sampling_pivot.SEPARATE)

    def agree(steps, separate, rounds=chain_sampling_ref.PIVOT_ROUNDS):
        for name, value in (("STEPS", steps), ("SEPARATE", separate), ("PIVOT_ROUNDS", rounds)):
            monkeypatch.setattr(_sampling_pivot, name, value)
        monkeypatch.setattr(chain_sampling_ref, "PIVOT_ROUNDS", rounds)
        got, ref = verify_both(x, drafts, T, k, p, mp, seed, off)
        assert torch.equal(got, ref), (steps, separate, rounds)

    for steps, separate in (module, (3, 2), (2, 2)):
        agree(steps, separate)
    for name, value in zip(("STEPS", "SEPARATE"), module):
        monkeypatch.setattr(_sampling_pivot, name, value)
    light = k == 0
    got, ref = verify_both(*(v[light] for v in (x, drafts, T, k, p, mp, seed, off)), late=False)
    assert torch.equal(got, ref)
    for steps, separate, rounds in ((*module, 1), (*module, 3), (3, 2, 3)):
        agree(steps, separate, rounds)
    short = pivot_draws(x.cpu(), T.cpu(), k.cpu(), p.cpu(), mp.cpu(), seed.cpu(), off.cpu())  # 3 attempts at most
    ran_out = short != y
    assert ran_out.any() and (short == torch.argmax(x.cpu().float(), -1))[ran_out].all()
    assert ran_out[2::4].any()  # late rows draw many times too


@pytest.mark.parametrize("top_p,min_p", [(0.8, 0.0), (0.9, 0.1)])
def test_one_draw_per_row_gives_the_chain_law(top_p, min_p):
    """The second form of the chain rule: over many seeds, the (accepted, token) outcomes of a pivot request
    follow the exact law of the coin rule (draft accepted with probability q(d), else q without d). With
    min-p the draws start from what it keeps, and top-p still weighs every entry (over min-p's mass alone,
    top-p 0.9 would cut the third token of the first row)."""
    B, K, V = 20000, 1, 6
    g = torch.Generator().manual_seed(2)
    logits1 = torch.randn(1, K + 1, V, generator=g) * 1.5
    drafts1 = torch.tensor([[int(torch.argmax(logits1[0, 0]))]])
    T, k, p = torch.full((B,), 0.9), torch.zeros(B, dtype=torch.long), torch.full((B,), top_p)
    mp = torch.full((B,), min_p)
    out = chain_verify_sampling_ref(
        logits1.expand(B, -1, -1),
        drafts1.expand(B, -1),
        T,
        k,
        p,
        torch.arange(B),
        torch.zeros(B, dtype=torch.long),
        min_p=mp,
        pivot=True,
    )
    q = chain_sampling_ref.sampling_probs(logits1, T[:1], k[:1], p[:1], min_p=mp[:1])[0].double()
    law = {(0, x): q[0, x].item() for x in range(V) if x != drafts1[0, 0]}
    law |= {(1, x): q[0, drafts1[0, 0]].item() * q[1, x].item() for x in range(V)}
    counts = {}
    for n, x in zip(out.num_accepted.tolist(), out.bonus.tolist()):
        counts[(n, x)] = counts.get((n, x), 0) + 1
    tv = 0.5 * sum(abs(counts.get(o, 0) / B - law.get(o, 0.0)) for o in set(law) | set(counts))
    assert tv < 3 * (len(law) / (2 * 3.1416 * B)) ** 0.5


def test_a_request_draws_by_the_pivot_exactly_when_its_class_is_top_p_or_general():
    """The class a request runs in and the kernels' per-row choice agree, so a request's seeded tokens do
    not depend on its batch mates: pivot requests are the ``top_p`` and ``general`` classes' own, the late
    ones the ``general`` class's, every other class's kernels take no pivot, and those two classes' do,
    the ``top_p`` class's with its promise of no late request."""
    from stepgraph.sampling import CLASSES, Sampling, SamplingParams, class_of

    settings = [
        SamplingParams(**kw)
        for kw in (
            {},
            {"temperature": 0.7},
            {"temperature": 0.7, "top_p": 0.9},
            {"temperature": 0.7, "top_p": 0.9, "min_p": 0.1},
            {"temperature": 0.0, "top_p": 0.9},
            {"temperature": 0.7, "top_k": 20, "top_p": 0.9},
            {"temperature": 0.7, "top_k": 300, "top_p": 0.9},
            {"temperature": 0.7, "top_k": 300},
            {"temperature": 0.7, "top_k": 2000},
            {"temperature": 0.7, "top_k": 2000, "min_p": 0.1},
            {"temperature": 0.7, "top_k": 2000, "top_p": 0.9},
            {"temperature": 0.7, "min_p": 0.1},
            {"temperature": 0.7, "top_p": 1.0},
        )
    ]
    values = [torch.tensor([getattr(s, f) for s in settings]) for f in ("temperature", "top_k", "top_p")]
    drawing = (Sampling.TOP_P, Sampling.GENERAL)
    assert pivot_requests(*values).tolist() == [class_of(s) in drawing for s in settings]
    assert late_pivot_requests(*values).tolist() == [class_of(s) is Sampling.GENERAL for s in settings]
    assert [bool(c.kernel and c.kernel.get("pivot")) for c in CLASSES] == [c.sampling in drawing for c in CLASSES]
    assert [c.kernel.get("late") for c in CLASSES[-2:]] == [False, True]


def test_draws_pick_the_block_inside_a_split(monkeypatch):
    """Splits of three blocks (the last split shorter): a draw picks its split from the split masses and its
    sub-block from the sub-block masses the mass steps stored, and the rows that go on alone in the last
    launch (the second here: those that need a second attempt) store new ones (and counts, for a top-k) before
    their next attempt."""
    from stepgraph.kernels import chain_sampling
    from stepgraph.kernels._sampling_filter import BLOCK

    split = 3 * BLOCK
    monkeypatch.setattr(chain_sampling, "split_layout", lambda rows, V: (-(-V // split), split))
    monkeypatch.setattr(_sampling_pivot, "STEPS", 2)
    g = torch.Generator().manual_seed(3)
    B, K, V = 4, 1, 2 * split + 857
    x = torch.randn(B, K + 1, V, generator=g) * torch.tensor([0.5, 0.1, 2.0, 3.0]).view(B, 1, 1)
    x = x.bfloat16().to(DEV)
    drafts = torch.argmax(x.float(), -1)[:, :K].contiguous()
    T = torch.tensor([1.0, 1.0, 0.8, 0.7], device=DEV)
    k = torch.zeros(B, dtype=torch.int64, device=DEV)
    p = torch.tensor([0.1, 1.0, 0.9, 0.95], device=DEV)  # flat rows with a small top-p make several attempts
    k[1] = 1100  # and with a top-k of a sixth of the row
    mp = torch.zeros(B, device=DEV)
    seed = torch.arange(B, dtype=torch.int64, device=DEV) + 11
    for step in range(2):
        off = torch.full((B,), step, dtype=torch.int64, device=DEV)
        got, ref = verify_both(x, drafts, T, k, p, mp, seed, off)
        assert torch.equal(got, ref), (step, got.tolist(), ref.tolist())


def test_the_first_draw_is_the_inverse_cdf_of_the_weights():
    """The first draw goes by sub-block masses over their own peak, scaled by ``exp(p - m)``: on rows whose
    sub-blocks peak far apart (and one all ``-inf``), it picks the entry the exact inverse CDF of ``w``
    picks for every number not within 1e-6 of the row's mass from a boundary; and it never picks an
    entry of zero weight."""
    from stepgraph.kernels.chain_sampling_ref import PIVOT_SUB, first_pivot_draw

    g = torch.Generator().manual_seed(4)
    B, K1, V, n = 2, 2, 3 * PIVOT_SUB + 77, 2048
    x = torch.randn(B, K1, V, generator=g) * 2 + torch.arange(4).repeat_interleave(PIVOT_SUB)[:V] * 3.0
    x[1, 0, PIVOT_SUB : 2 * PIVOT_SUB] = float("-inf")
    T = torch.tensor([1.0, 0.7])
    u = ((torch.arange(n) + 0.5) / n).view(1, 1, n).expand(B, K1, n)
    got = first_pivot_draw(x, T, u.contiguous())
    w = chain_sampling_ref._weights(x, T).double()
    cdf = torch.cumsum(w, -1)
    goal = u.double() * cdf[..., -1:]
    exact = torch.searchsorted(cdf, goal, right=True)
    near = (cdf[..., None, :] - goal[..., None]).abs().amin(-1) < 1e-6 * cdf[..., -1:]
    assert (got == exact)[~near].all() and (~near).float().mean() > 0.99
    assert (w.gather(-1, got) > 0).all()


@pytest.mark.parametrize("min_p", [0.0, 0.4])
def test_the_draws_with_a_top_k_give_the_top_k_law(min_p):
    """A draw is checked by the number of strictly larger keys against ``top_k``: over many seeds, the
    draws of a row follow ``q`` of its top-k set (a tie at the k-th value kept), with min-p or without."""
    B, V = 20000, 8
    x = torch.tensor([[[2.0, 0.5, 1.0, 1.0, -1.0, 0.0, 1.5, -0.5]]])  # top-3 keeps 0, 6 and both 1.0s
    T, k, p = torch.full((B,), 0.9), torch.full((B,), 3), torch.ones(B)
    mp = torch.full((B,), min_p)
    y = pivot_draws(x.expand(B, -1, -1), T, k, p, mp, torch.arange(B), torch.zeros(B, dtype=torch.long))[:, 0]
    q = chain_sampling_ref.sampling_probs(x, T[:1], k[:1], p[:1], min_p=mp[:1])[0, 0].double()
    assert (q > 0).sum() == (2 if min_p else 4)  # min-p 0.4 cuts the two 1.0s
    freq = torch.bincount(y, minlength=V).double() / B
    tv = 0.5 * (freq - q).abs().sum().item()
    assert tv < 3 * (V / (2 * 3.1416 * B)) ** 0.5


@pytest.mark.parametrize("min_p", [0.0, 0.6])
def test_late_draws_give_the_top_k_top_p_law(min_p, monkeypatch):
    """A late request (a large top-k with top-p; the bound is lowered to 2 here, so a top-k of 3 is large)
    draws from its top-k cut, and its top-p weighs the top-k set alone: over many seeds the draws follow
    ``q``. Top-p 0.6 keeps 2.0 and 1.5 of the top-3 set; over every entry's mass it would keep the 1.0s too.
    Min-p 0.6 cuts 1.5 as well."""
    monkeypatch.setattr(chain_sampling_ref, "SMALL_TOP_K_MAX", 2)
    B, V = 20000, 8
    x = torch.tensor([[[2.0, 0.5, 1.0, 1.0, -1.0, 0.0, 1.5, -0.5]]])
    T, k, p = torch.full((B,), 0.9), torch.full((B,), 3), torch.full((B,), 0.6)
    mp = torch.full((B,), min_p)
    assert late_pivot_requests(T, k, p).all()
    y = pivot_draws(x.expand(B, -1, -1), T, k, p, mp, torch.arange(B), torch.zeros(B, dtype=torch.long))[:, 0]
    q = chain_sampling_ref.sampling_probs(x, T[:1], k[:1], p[:1], min_p=mp[:1])[0, 0].double()
    assert (q > 0).nonzero().flatten().tolist() == ([0] if min_p else [0, 6])
    freq = torch.bincount(y, minlength=V).double() / B
    tv = 0.5 * (freq - q).abs().sum().item()
    assert tv < 3 * (V / (2 * 3.1416 * B)) ** 0.5


@pytest.mark.parametrize(
    "gather_cap,top_k,dtype",
    [
        pytest.param(_sampling_topk.GATHER_CAP, (300, 1000), torch.bfloat16, id="lists"),
        pytest.param(256, (200, 250), torch.float16, id="radix", marks=pytest.mark.slow),
    ],  # radix in the slow run
)
def test_small_top_k_rows_in_the_top_p_class_find_their_cut_in_its_rounds(gather_cap, top_k, dtype, monkeypatch):
    """A batch that mixes every kind of row runs in the ``top_p`` class: small top-k requests (with top-p,
    with min-p, hundreds of ties at the k-th value, a top-k of 1000) find their cut in the rounds' first
    launches as the small top-k class finds it in its own (with a gather cap of 256 the long lists take the
    row's radix select; a top-k stays within the cap), beside a pivot request, a late one (a large top-k with
    top-p: its cut is its top-k cut, then it draws), min-p alone and a greedy row, over bfloat16 (16-bit keys)
    and float16 logits (32-bit keys). Every other cut equals the reference's; the tokens are the
    reference's, and the small top-k requests draw the small top-k class's tokens."""
    monkeypatch.setattr(_sampling_topk, "GATHER_CAP", gather_cap)
    g = torch.Generator().manual_seed(9)
    B, K, V = 7, 1, 2600
    x = torch.randn(B, K + 1, V, generator=g) * 1.5
    x[1, :, 900:1400] = 1.0  # 500 ties at the k-th value, across two splits
    x = x.to(dtype).to(DEV)
    drafts = torch.argmax(x[:, :K].float(), -1)
    drafts[1, 0] = 1000  # a tie: kept, its row's correction leaves it out
    T = torch.tensor([0.8, 1.0, 0.7, 0.9, 1.2, 0.0, 0.8], device=DEV)
    k = torch.tensor([50, top_k[0], 0, 1500, top_k[1], 20, 0], device=DEV)
    p = torch.tensor([0.9, 1.0, 0.9, 0.8, 1.0, 0.9, 1.0], device=DEV)
    mp = torch.tensor([0.0, 0.02, 0.0, 0.0, 0.0, 0.0, 0.1], device=DEV)
    assert pivot_requests(T, k, p).tolist() == [False, False, True, True, False, False, False]
    cut = filter_cut_keys(x, T, k, p, pivot=True)
    cut_rows = [0, 1, 4, 6]  # sampled, not drawn by the pivot
    assert torch.equal(cut[cut_rows], filter_cut_keys_ref(x, T, k, p)[cut_rows])
    assert torch.equal(cut[3], filter_cut_keys_ref(x, T, k, torch.ones_like(p))[3])
    small = [0, 1, 4, 5]  # the small top-k class's rows (and the greedy one)
    seed = torch.arange(B, dtype=torch.int64, device=DEV) + 5
    for step in range(2):
        off = torch.full((B,), step, dtype=torch.int64, device=DEV)
        got, ref = verify_both(x, drafts, T, k, p, mp, seed, off)
        assert torch.equal(got, ref), (step, got.tolist(), ref.tolist())
        in_class = chain_verify_sampling(x, drafts, T, k, p, seed, off.clone(), min_p=mp, small_top_k=True).tokens
        assert torch.equal(got[small], in_class[small])


def test_a_top_p_of_zero_keeps_nothing_in_the_top_p_class():
    """The ``top_p`` class searches no top-p cut: a row with ``top_p = 0`` (which ``SamplingParams`` refuses, a
    kernel caller may pass) and no small top-k keeps no entry there, as the reference defines it: its drafts
    are rejected, even the argmax, and it emits its argmax. With no top-k, and with a top-k above 1024 (whose
    count phase still runs)."""
    g = torch.Generator().manual_seed(3)
    B, K, V = 2, 2, 1500
    x = (torch.randn(B, K + 1, V, generator=g) * 2).bfloat16().to(DEV)
    drafts = torch.argmax(x[:, :K].float(), -1)
    T = torch.tensor([0.8, 0.9], device=DEV)
    k = torch.tensor([0, 1200], device=DEV)
    p = torch.zeros(B, device=DEV)
    seed = torch.arange(B, device=DEV)
    off = torch.zeros(B, dtype=torch.int64, device=DEV)
    got, ref = verify_both(x, drafts, T, k, p, torch.zeros(B, device=DEV), seed, off)
    assert torch.equal(got, ref)
    assert torch.equal(got[:, 0], torch.argmax(x[:, 0].float(), -1)) and (got[:, 1:] == -1).all()
