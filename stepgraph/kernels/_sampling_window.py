"""The top-k / top-p cut-off of the filtered class: a histogram, a window around the cut, the window's
entries sorted.

With ``z = x / T``, ``m`` the row's largest ``z`` and ``d = m - z`` (``w = exp(-d)``), every entry falls in
one of ``NB`` bins of ``d``: width 1/64 over ``[0, 12)``, 1/4 over ``[12, 75.5)``, one for larger finite
``d`` and one for ``-inf`` entries (``w = 0``). The bin is a monotone function of the logit, so a bin is a
range of keys and ties share one. Launches:

1. per (row, vocabulary split): the split's bin counts (``tl.histogram``) and ``sum w`` in float64;
2. one program per row: the bin of the k-th entry (counts are exact), then bounds on the mass of every
   bin (its count times ``w`` at its edges) and on the top-k set's, hence the bins that can hold the top-p
   cut; the window is those bins, or, when they hold more than ``CAP_ROW`` entries, the bins around the
   estimate (counts times ``w`` at the bin's middle) that fit;
3. per (row, split): the float64 mass of the entries above the window and between the window and the
   k-th entry's bin, and the keys of the window's entries (and of that bin's) appended to the row's list;
4. one program per row: the listed keys sorted, their float64 cumulative mass from the mass above them,
   the k-th key and the top-p cut, both checked exactly against the definition. A row whose window
   turns out not to hold its cut, or whose list overflowed, is marked for :func:`._sampling_filter`'s
   exact search, which then runs in one program for that row alone.

The masses the cut is decided by are exact float64 sums of float32 ``w`` (the bounds only choose the
window), so the kept set does not depend on how rows are split, and matches the reference.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._sampling_filter import EXACT, INF_KEY_C, NEG_INF_KEY_C, _key_value, _kth_largest, _least_below, row_key

NB: tl.constexpr = tl.constexpr(1024)  # bins of d
FINE: tl.constexpr = tl.constexpr(768)  # bins of width 1 / FINE_SCALE over [0, FINE / FINE_SCALE)
FINE_SCALE: tl.constexpr = tl.constexpr(64.0)
COARSE_SCALE: tl.constexpr = tl.constexpr(4.0)  # then bins of width 1 / COARSE_SCALE
FAR: tl.constexpr = tl.constexpr(1022)  # finite d past the coarse bins
ZERO: tl.constexpr = tl.constexpr(1023)  # -inf entries: w = 0
CAP_ROW = 4096  # keys one row's window may list
SEARCH: tl.constexpr = tl.constexpr(1)  # plan states: the window is listed and searched
LOWEST: tl.constexpr = tl.constexpr(-(1 << 40))  # a cut below every key: all kept
NONE32: tl.constexpr = tl.constexpr(-2147483648)
SLACK: tl.constexpr = tl.constexpr(1e-5)  # relative margin of the bounds: exp's and the bins' rounding
EPS: tl.constexpr = tl.constexpr(1.0 / 32768)  # relative half-width of the estimated window's mass


@triton.jit
def d_bin(d):
    """The bin of ``d = m - z >= 0`` (int32); monotone in ``d``."""
    coarse = FINE + (d - FINE / FINE_SCALE) * COARSE_SCALE
    j = tl.where(d < FINE / FINE_SCALE, d * FINE_SCALE, tl.minimum(coarse, FAR * 1.0))
    return tl.where(d > 3.0e38, ZERO * 1.0, j).to(tl.int32)  # d = +inf: a -inf logit


@triton.jit
def bin_edge(j):
    """The least ``d`` of bin ``j`` (float64; +inf past the last finite bin)."""
    jf = j.to(tl.float64)
    edge = tl.where(j < FINE, jf / FINE_SCALE, FINE / FINE_SCALE + (jf - FINE) / COARSE_SCALE)
    return tl.where(j > FAR, float("inf"), edge)


@triton.jit
def row_setting(temp_ptr, topk_ptr, topp_ptr, gkey_ptr, zmax_ptr, row, K1, V, n_splits, NS_P2: tl.constexpr):
    """``(needs a cut, m, 1 / T, k on, k, top_p)`` of the row: a sampled row with regular logits (no NaN or
    +inf, not all -inf, a finite ``m``) and top-k or top-p on."""
    b = row // K1
    sp = tl.arange(0, NS_P2)
    on = sp < n_splits
    gk = tl.max(tl.load(gkey_ptr + row * n_splits + sp, mask=on, other=NONE32), axis=0)
    m = tl.max(tl.load(zmax_ptr + row * n_splits + sp, mask=on, other=float("-inf")), axis=0)
    t = tl.load(temp_ptr + b).to(tl.float32)
    k = tl.load(topk_ptr + b).to(tl.int64)
    p = tl.load(topp_ptr + b).to(tl.float64)
    k_on = (k > 0) & (k < V)
    finite = (m.to(tl.int32, bitcast=True) & 0x7F800000) != 0x7F800000
    regular = (gk < INF_KEY_C) & (gk != NEG_INF_KEY_C) & (t > 0) & finite
    return regular & (k_on | (p < 1.0)), m, 1.0 / tl.where(t > 0, t, 1.0), k_on, k, p


@triton.jit
def _hist_kernel(logits_ptr, stride_b, stride_j, temp_ptr, topk_ptr, topp_ptr, gkey_ptr, zmax_ptr, hist_ptr,
                 wsum_ptr, V, K1, n_splits, SPLIT: tl.constexpr, BLOCK: tl.constexpr, NS_P2: tl.constexpr):  # fmt: skip
    """Launch 1, per (row, split) of a row that needs a cut: the bin counts and the float64 ``sum w``."""
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    active, m, inv_t, k_on, k, p = row_setting(temp_ptr, topk_ptr, topp_ptr, gkey_ptr, zmax_ptr, row, K1, V, n_splits,
                                               NS_P2)  # fmt: skip
    if active:
        base = logits_ptr + (row // K1) * stride_b + (row % K1) * stride_j
        hist = tl.zeros([NB], tl.int32)
        total = tl.zeros([BLOCK], tl.float64)
        start = sp * SPLIT
        for i in range(0, SPLIT, BLOCK):
            offs = start + i + tl.arange(0, BLOCK)
            inb = offs < V
            x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
            z = x * inv_t
            hist += tl.histogram(d_bin(m - z), NB, mask=inb)
            total += tl.where(inb, tl.exp(z - m), 0.0).to(tl.float64)
        tl.store(hist_ptr + (row * n_splits + sp) * NB + tl.arange(0, NB), hist)
        tl.store(wsum_ptr + row * n_splits + sp, tl.sum(total, axis=0))


@triton.jit
def _first_reaching(cum, goal, bins):
    """The least bin whose cumulative value reaches ``goal`` (``FAR`` when none does)."""
    return tl.min(tl.where(cum >= goal, bins, FAR), axis=0)


@triton.jit
def _window_kernel(temp_ptr, topk_ptr, topp_ptr, gkey_ptr, zmax_ptr, hist_ptr, wsum_ptr, plan_ptr,
                   goal_ptr, fill_ptr, cut_ptr, V, K1, n_splits, NS_P2: tl.constexpr, CAP: tl.constexpr):  # fmt: skip
    """Launch 2, one program per row: the plan ``(state, j_lo, j_hi, jk, entries above the window, entries
    between it and bin jk)`` and, without top-k, the top-p goal ``p * sum w``; rows that need no cut get
    theirs here (every entry kept)."""
    row = tl.program_id(0).to(tl.int64)
    active, m, inv_t, k_on, k, p = row_setting(temp_ptr, topk_ptr, topp_ptr, gkey_ptr, zmax_ptr, row, K1, V, n_splits,
                                               NS_P2)  # fmt: skip
    tl.store(fill_ptr + row, 0)
    tl.store(plan_ptr + row * 8, 0)
    if not active:
        tl.store(cut_ptr + row, LOWEST)
    else:
        bins = tl.arange(0, NB)
        h = tl.zeros([NB], tl.int32)
        for s in range(0, n_splits):
            h += tl.load(hist_ptr + (row * n_splits + s) * NB + bins)
        sp = tl.arange(0, NS_P2)
        total = tl.sum(tl.load(wsum_ptr + row * n_splits + sp, mask=sp < n_splits, other=0.0), axis=0)
        count = tl.cumsum(h, axis=0)  # entries in bins <= j
        lo_d, hi_d = bin_edge(bins), bin_edge(bins + 1)
        hf = h.to(tl.float64)
        up_w = tl.where(bins < ZERO, tl.exp(-lo_d) * (1.0 + SLACK), 0.0)  # w of an entry of the bin, at most
        low_w = tl.where(bins < FAR, tl.exp(-hi_d) * (1.0 - SLACK), 0.0)  # and at least
        # the mean w over a bin its entries fill evenly, then scaled so that the bins add up to sum w
        mid_w = tl.where(bins < FAR, (tl.exp(-lo_d) - tl.exp(-hi_d)) / (hi_d - lo_d), 0.5 * up_w)
        mid_w = mid_w * (total / tl.sum(hf * mid_w, axis=0))
        cum_up, cum_low, cum_est = tl.cumsum(hf * up_w, axis=0), tl.cumsum(hf * low_w, axis=0), tl.cumsum(hf * mid_w, 0)
        # the k-th entry's bin, and the top-k set's mass: bounds and estimate (exact without top-k)
        jk = tl.where(k_on, tl.min(tl.where(count >= k, bins, NB), axis=0), NB)
        at_k = bins == jk
        above_k = tl.sum(tl.where(at_k, count - h, 0), axis=0)
        rest = (k - above_k).to(tl.float64)
        before = bins < jk
        w_up = tl.where(k_on, tl.sum(tl.where(before, hf * up_w, 0.0) + tl.where(at_k, hf * up_w, 0.0), 0), total)
        w_low = tl.where(k_on, tl.sum(tl.where(before, hf * low_w, 0.0) + tl.where(at_k, rest * low_w, 0.0), 0), total)
        w_est = tl.where(k_on, tl.sum(tl.where(before, hf * mid_w, 0.0) + tl.where(at_k, rest * mid_w, 0.0), 0), total)
        # the bins that can hold the top-p cut (the first whose cumulative mass reaches p * W), within jk
        j_a = tl.minimum(_first_reaching(cum_up, p * w_low, bins), jk)
        j_b = tl.minimum(_first_reaching(cum_low, p * w_up, bins), jk)
        j_lo = tl.minimum(_first_reaching(cum_est, p * w_est * (1.0 - EPS), bins), jk)
        j_hi = tl.minimum(_first_reaching(cum_est, tl.minimum(p * (1.0 + EPS), 1.0) * w_est, bins), jk)
        j_est = tl.minimum(_first_reaching(cum_est, p * w_est, bins), jk)
        n_k = tl.sum(tl.where(at_k & (jk != ZERO), h, 0), axis=0)  # bin jk is listed too (unless -inf)
        n_in = tl.sum(tl.where((bins >= j_a) & (bins <= j_b) & ~at_k, h, 0), axis=0) + n_k
        n_est = tl.sum(tl.where((bins >= j_lo) & (bins <= j_hi) & ~at_k, h, 0), axis=0) + n_k
        j_lo = tl.where(n_in <= CAP, j_a, tl.where(n_est <= CAP, j_lo, j_est))
        j_hi = tl.where(n_in <= CAP, j_b, tl.where(n_est <= CAP, j_hi, j_est))
        if p >= 1.0:  # top-k alone: the window is bin jk
            j_lo = jk
            j_hi = jk
        n_above = tl.sum(tl.where(bins < j_lo, h, 0), axis=0)
        n_mid = tl.sum(tl.where((bins > j_hi) & (bins < jk), h, 0), axis=0)
        if (p >= 1.0) & (jk == ZERO):  # the k-th entry is -inf: every entry is kept
            tl.store(cut_ptr + row, LOWEST)
        else:
            plan = plan_ptr + row * 8
            tl.store(plan, SEARCH)
            tl.store(plan + 1, j_lo)
            tl.store(plan + 2, j_hi)
            tl.store(plan + 3, jk)
            tl.store(plan + 4, n_above)
            tl.store(plan + 5, n_mid)
            tl.store(plan + 6, (V - tl.sum(tl.where(bins <= j_hi, h, 0), axis=0)).to(tl.int32))  # entries below
            tl.store(goal_ptr + row, p * total)


@triton.jit
def _list_kernel(logits_ptr, stride_b, stride_j, temp_ptr, gkey_ptr, zmax_ptr, plan_ptr, part_ptr, list_ptr,
                 fill_ptr, V, K1, n_splits, SPLIT: tl.constexpr, BLOCK: tl.constexpr, NS_P2: tl.constexpr,
                 SHIFT: tl.constexpr, CAP: tl.constexpr):  # fmt: skip
    """Launch 3, per (row, split) of a planned row: the float64 mass above the window and between it and bin
    jk, and the keys of the window's and bin jk's entries appended to the row's list (any order: the
    search sorts them; past ``CAP`` only counted)."""
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    plan = plan_ptr + row * 8
    if tl.load(plan) == SEARCH:
        j_lo = tl.load(plan + 1)
        j_hi = tl.load(plan + 2)
        jk = tl.load(plan + 3)
        s = tl.arange(0, NS_P2)
        m = tl.max(tl.load(zmax_ptr + row * n_splits + s, mask=s < n_splits, other=float("-inf")), axis=0)
        t = tl.load(temp_ptr + row // K1).to(tl.float32)
        inv_t = 1.0 / t
        base = logits_ptr + (row // K1) * stride_b + (row % K1) * stride_j
        above = tl.zeros([BLOCK], tl.float64)
        mid = tl.zeros([BLOCK], tl.float64)
        start = sp * SPLIT
        for i in range(0, SPLIT, BLOCK):
            offs = start + i + tl.arange(0, BLOCK)
            inb = offs < V
            x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
            z = x * inv_t
            j = d_bin(m - z)
            w = tl.exp(z - m).to(tl.float64)
            above += tl.where(inb & (j < j_lo), w, 0.0)
            mid += tl.where(inb & (j > j_hi) & (j < jk), w, 0.0)
            sel = inb & (((j >= j_lo) & (j <= j_hi)) | ((j == jk) & (jk != ZERO)))
            n = tl.sum(sel.to(tl.int32), axis=0)
            if n > 0:
                at = tl.atomic_add(fill_ptr + row, n) + tl.cumsum(sel.to(tl.int32), axis=0) - 1
                tl.store(list_ptr + row * CAP + at, row_key(x, SHIFT).to(tl.int32), mask=sel & (at < CAP))
        tl.store(part_ptr + (row * n_splits + sp) * 2, tl.sum(above, axis=0))
        tl.store(part_ptr + (row * n_splits + sp) * 2 + 1, tl.sum(mid, axis=0))


@triton.jit
def _search_kernel(temp_ptr, topk_ptr, topp_ptr, zmax_ptr, plan_ptr, goal_ptr, part_ptr, list_ptr, fill_ptr,
                   cut_ptr, K1, n_splits, NS_P2: tl.constexpr, SHIFT: tl.constexpr, CAP: tl.constexpr):  # fmt: skip
    """Launch 4, one program per planned row: the k-th key and the top-p cut among the listed keys, or the
    row marked ``EXACT`` when they do not decide them (a cut outside the window, an overflowing list)."""
    row = tl.program_id(0).to(tl.int64)
    plan = plan_ptr + row * 8
    if tl.load(plan) == SEARCH:
        b = row // K1
        j_hi = tl.load(plan + 2)
        jk = tl.load(plan + 3)
        n_above = tl.load(plan + 4).to(tl.int64)
        n_mid = tl.load(plan + 5).to(tl.int64)
        n_below = tl.load(plan + 6)
        filled = tl.load(fill_ptr + row)
        s = tl.arange(0, NS_P2)
        on = s < n_splits
        m = tl.max(tl.load(zmax_ptr + row * n_splits + s, mask=on, other=float("-inf")), axis=0)
        above = tl.sum(tl.load(part_ptr + (row * n_splits + s) * 2, mask=on, other=0.0), axis=0)
        mid = tl.sum(tl.load(part_ptr + (row * n_splits + s) * 2 + 1, mask=on, other=0.0), axis=0)
        inv_t = 1.0 / tl.load(temp_ptr + b).to(tl.float32)
        k = tl.load(topk_ptr + b).to(tl.int64)
        p = tl.load(topp_ptr + b).to(tl.float64)
        k_on = jk < NB
        split_k = k_on & (jk > j_hi) & (jk != ZERO)  # bin jk listed apart from the window, below it
        n_mid = tl.where(split_k, n_mid, 0)
        pos = tl.arange(0, CAP)
        valid = pos < filled
        key = tl.load(list_ptr + row * CAP + pos, mask=valid, other=NONE32)
        z = _key_value(key, SHIFT) * inv_t
        w = tl.where(valid, tl.exp(z - m), 0.0).to(tl.float64)
        in_k = valid & split_k & (d_bin(m - z) == jk)
        top = tl.max(key, axis=0).to(tl.int64)
        least = tl.min(tl.where(valid, key, 2147483647), axis=0).to(tl.int64)
        # the k-th key: the (k - entries above the window - entries between it and bin jk)-th listed
        rank = k - n_above - n_mid
        c_k = _kth_largest(key, valid, rank, least, top + 1)
        c_k = tl.where(k_on, tl.where(jk == ZERO, NEG_INF_KEY_C >> SHIFT, c_k), LOWEST)
        bad = (filled > CAP) | (filled == 0) | (k_on & (jk != ZERO) & ((rank < 1) | (rank > filled)))
        cut = c_k
        if p < 1.0:
            w = tl.where(key >= c_k, w, 0.0)  # the top-k set
            win_mass = tl.sum(tl.where(in_k, 0.0, w), axis=0)
            win_least = tl.min(tl.where(valid & ~in_k, key, 2147483647), axis=0).to(tl.int64)
            goal = tl.load(goal_ptr + row)
            if k_on & (jk != ZERO):  # the top-k set's mass (a -inf k-th entry keeps every entry: p * sum w)
                goal = p * (above + win_mass + tl.where(split_k, mid, 0.0) + tl.sum(tl.where(in_k, w, 0.0), axis=0))
            # M(c) = above + listed mass above c (+ the mass between window and bin jk below the window)
            low = tl.maximum(c_k, least) - 1
            hi = _least_below(key, w, goal, low, top, above, tl.where(split_k, mid, 0.0), win_least)
            cut = tl.min(tl.where(valid & (key >= hi), key, 2147483647), axis=0).to(tl.int64)
            bad = bad | (above >= goal)  # the cut lies above the window
            everything = above + win_mass  # M just below the window's least key, before any mass below it
            # without top-k: every listed key kept, and the entries below the list hold more of the goal
            no_k = ~k_on | (jk == ZERO)
            bad = bad | (no_k & (hi <= low + 1) & (n_below > 0) & (everything < goal))
            # top-k split from the window: the cut lies between them when the first entry after the window is
            # kept (its M is ``everything``) and bin jk's largest is not
            top_k_key = tl.max(tl.where(in_k, key, NONE32), axis=0).to(tl.int64)
            bad = bad | (split_k & (n_mid > 0) & (everything < goal) & (hi > top_k_key))
            cut = tl.maximum(cut, c_k)
        if bad:
            tl.store(plan, EXACT)
        else:
            tl.store(cut_ptr + row, cut)
