"""Top-k/top-p launch 1 of chain verify sampling: one program per row finds the exact cut-off.

The kept set of a row is ``{key >= c*}`` (sortable keys of the logits): ``c*`` is the largest key whose
count (top-k) and then mass (top-p, over the top-k set) of entries with key >= ``c*`` still reaches the
target. A WAYS-way bisection over the 32-bit key space finds it exactly in about 16 passes over the row;
then one pass sums the kept mass and takes the Gumbel argmax over the kept set minus the draft token.
Cost: ~17 passes over V per row, by one program. That is the limit at small batches (see the README).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._argmax import sortable_key

INF_KEY_C: tl.constexpr = tl.constexpr(0x7F800000)  # sortable_key(+inf); NaN keys are larger
NEG_INF_KEY_C: tl.constexpr = tl.constexpr(-2139095041)  # sortable_key(-inf)


@triton.jit
def _gumbel(seed, stream, offs):
    """Gumbel(0, 1) noise for vocabulary offsets ``offs`` of Philox stream ``stream`` (int64)."""
    u = tl.rand(seed, (stream << 32) | offs.to(tl.int64))
    return -tl.log(-tl.log(u))


@triton.jit
def _row_setup(row, K1, K, temp_ptr, draft_ptr, stride_draft, seed_ptr, offset_ptr):
    b = row // K1
    j = row % K1
    t = tl.load(temp_ptr + b).to(tl.float32)
    inv_t = 1.0 / tl.where(t > 0, t, 1.0)
    excl = tl.load(draft_ptr + b * stride_draft + j, mask=j < K, other=-1).to(tl.int64)
    excl = tl.where(j < K, excl, -1)
    seed = tl.load(seed_ptr + b)
    stream = tl.load(offset_ptr + b) * (K1 + 1) + j
    return b, j, inv_t, excl, seed, stream


@triton.jit
def _search(base, V, lo, hi, target, inv_t, m, cut, MASS: tl.constexpr, BLOCK: tl.constexpr, WAYS: tl.constexpr):
    """Largest key ``c`` in ``[lo, hi)`` with ``G(c) >= target``, where ``G(c)`` is the count (or the mass
    ``exp(z - m)`` over entries with key >= ``cut``) of entries with key >= c. Requires
    ``G(lo) >= target > G(hi)``. G is non-increasing, so the WAYS-way bisection is exact (fp32 sums of
    non-negative terms in a fixed order stay monotone in c). Each pass accumulates per lane in a
    ``[BLOCK, WAYS]`` tile and reduces once; about 32 / log2(WAYS + 1) passes."""
    w_i = tl.arange(0, WAYS).to(tl.int64)
    while hi - lo > 1:
        step = tl.maximum((hi - lo) // (WAYS + 1), 1)
        cands = lo + step * (w_i + 1)
        valid = cands < hi
        c32 = tl.minimum(cands, 2147483647).to(tl.int32)[None, :]  # keys are int32; hi <= INF_KEY + 1 fits
        if MASS:
            acc = tl.zeros([BLOCK, WAYS], tl.float32)
        else:
            acc = tl.zeros([BLOCK, WAYS], tl.int32)
        for i in range(0, V, BLOCK):
            offs = i + tl.arange(0, BLOCK)
            x = tl.load(base + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
            key = tl.where(offs < V, sortable_key(x), -2147483648)
            ge = key[:, None] >= c32
            if MASS:
                w = tl.where(key >= cut, tl.exp(x * inv_t - m), 0.0)
                acc += tl.where(ge, w[:, None], 0.0)
            else:
                acc += ge.to(tl.int32)
        total = tl.sum(acc, axis=0)
        ok = valid & (total >= target)
        lo = tl.max(tl.where(ok, cands, lo), axis=0)
        hi = tl.min(tl.where(valid & (total < target), cands, hi), axis=0)
    return lo


@triton.jit
def _sample_filter_kernel(
    logits_ptr,
    stride_b,
    stride_j,
    draft_ptr,
    stride_draft,
    temp_ptr,
    topk_ptr,
    topp_ptr,
    seed_ptr,
    offset_ptr,
    gkey_ptr,
    gidx_ptr,
    m_ptr,
    s_ptr,
    skey_ptr,
    sidx_ptr,
    cut_ptr,
    V,
    K,
    K1,
    BLOCK: tl.constexpr,
    SEARCH_BLOCK: tl.constexpr,
    WAYS: tl.constexpr,
):
    """Top-k/top-p class: one program per row; exact cut-off search, then one sampling pass."""
    row = tl.program_id(0).to(tl.int64)
    b, j, inv_t, excl, seed, stream = _row_setup(row, K1, K, temp_ptr, draft_ptr, stride_draft, seed_ptr, offset_ptr)
    base = logits_ptr + b * stride_b + j * stride_j
    # pass A: greedy argmax, key range, max of z
    g_best = tl.full([BLOCK], -2147483648, tl.int32)
    g_idx = tl.zeros([BLOCK], tl.int32)
    k_min = tl.full([BLOCK], 2147483647, tl.int32)
    m_lane = tl.full([BLOCK], float("-inf"), tl.float32)
    for i in range(0, V, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        inb = offs < V
        x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
        key = tl.where(inb, sortable_key(x), -2147483648)
        better = key > g_best
        g_best = tl.where(better, key, g_best)
        g_idx = tl.where(better, offs.to(tl.int32), g_idx)
        k_min = tl.minimum(k_min, tl.where(inb, key, 2147483647))
        m_lane = tl.maximum(m_lane, x * inv_t)
    gk = tl.max(g_best, axis=0)
    k_max = gk.to(tl.int64)
    lo0 = tl.min(k_min, axis=0).to(tl.int64)
    m = tl.max(m_lane, axis=0)
    t = tl.load(temp_ptr + b)
    regular = (gk < INF_KEY_C) & (gk != NEG_INF_KEY_C) & (t > 0)
    cut = lo0
    top_k = tl.load(topk_ptr + b).to(tl.int64)
    top_p = tl.load(topp_ptr + b).to(tl.float32)
    if regular:
        if (top_k > 0) & (top_k < V):
            cut = _search(base, V, lo0, k_max + 1, top_k.to(tl.int32), inv_t, m, cut, False, SEARCH_BLOCK, WAYS)
        if top_p < 1.0:
            z_acc = tl.zeros([BLOCK], tl.float32)
            for i in range(0, V, BLOCK):
                offs = i + tl.arange(0, BLOCK)
                inb = offs < V
                x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
                key = tl.where(inb, sortable_key(x), -2147483648)
                z_acc += tl.where(key >= cut, tl.exp(x * inv_t - m), 0.0)
            target = top_p * tl.sum(z_acc, axis=0)
            cut = _search(base, V, cut, k_max + 1, target, inv_t, m, cut, True, SEARCH_BLOCK, WAYS)
    # pass C: kept mass and Gumbel argmax over the kept set (minus the draft token)
    s_acc = tl.zeros([BLOCK], tl.float32)
    s_best = tl.full([BLOCK], -2147483648, tl.int32)
    s_idx = tl.zeros([BLOCK], tl.int32)
    for i in range(0, V, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        inb = offs < V
        x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
        key = tl.where(inb, sortable_key(x), -2147483648)
        kept = inb & (key.to(tl.int64) >= cut)
        z = x * inv_t
        s_acc += tl.where(kept, tl.exp(z - m), 0.0)
        score = tl.where(kept & (offs != excl), sortable_key(z + _gumbel(seed, stream, offs)), -2147483648)
        better = score > s_best
        s_best = tl.where(better, score, s_best)
        s_idx = tl.where(better, offs.to(tl.int32), s_idx)
    tl.store(gkey_ptr + row, gk)
    tl.store(gidx_ptr + row, tl.min(tl.where(g_best == gk, g_idx, 2147483647), axis=0))
    sk = tl.max(s_best, axis=0)
    tl.store(skey_ptr + row, sk)
    tl.store(sidx_ptr + row, tl.min(tl.where(s_best == sk, s_idx, 2147483647), axis=0))
    tl.store(m_ptr + row, m)
    tl.store(s_ptr + row, tl.sum(s_acc, axis=0))
    tl.store(cut_ptr + row, cut)
