"""Sortable keys of the filtered class, its statistics pass, and the exact search of a row's cut-off.

The kept set of a row is ``{key >= cut}`` over sortable integer keys of its logits (16-bit keys for
bfloat16, whose float32 keys have 16 zero bits; 32-bit keys otherwise). :mod:`._sampling_window` finds
``cut`` for nearly every row; a row its window does not decide takes :func:`_exact_cut_kernel`: one
program bisects the key interval ``[lo, hi)`` in rounds over the whole row, 16 buckets a round, a count
per bucket while looking for the top-k cut and a float64 mass ``exp(z - m)`` per bucket while looking for
the top-p cut. ``G(c)`` is the count (or mass) of entries with key >= ``c``; the search keeps ``G(lo) >=
target > G(hi)`` and narrows the interval sixteen-fold per round, so a phase takes at most four rounds
over 16-bit keys and eight over 32-bit keys. The top-k phase comes first; the top-p phase then searches
``[cut_k, max]`` with target ``top_p * G(cut_k)``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._argmax import lanes_argmax, sortable_key, track_argmax

INF_KEY_C: tl.constexpr = tl.constexpr(0x7F800000)  # sortable_key(+inf); NaN keys are larger
NEG_INF_KEY_C: tl.constexpr = tl.constexpr(-2139095041)  # sortable_key(-inf)
NBINS: tl.constexpr = tl.constexpr(16)
EXACT: tl.constexpr = tl.constexpr(2)  # a row's plan state: its cut is left to the exact search
TOPK: tl.constexpr = tl.constexpr(0)
TOPP_START: tl.constexpr = tl.constexpr(1)  # top-p target not known yet: this round's sums give G(lo)
TOPP: tl.constexpr = tl.constexpr(2)
DONE: tl.constexpr = tl.constexpr(3)

BLOCK = 1024  # entries per step of every pass; a split is a multiple of it
MASS_BLOCK: tl.constexpr = tl.constexpr(128)  # float64 [16, MASS_BLOCK] per-lane bucket sums in registers
P_PROBES: tl.constexpr = tl.constexpr(16)  # keys tried at once by the searches over listed keys


def num_rounds(key_bits: int) -> int:
    """Rounds that finish both phases for keys of ``key_bits`` bits (16 buckets: 4 bits a round)."""
    return 2 * ((key_bits + 3) // 4)


def key_shift(dtype) -> int:
    """16 for bfloat16 (its float32 keys end in 16 zero bits), else 0."""
    import torch

    return 16 if dtype == torch.bfloat16 else 0


@triton.jit
def row_key(x, SHIFT: tl.constexpr):
    """Sortable key of float32 ``x`` as int64, in the row's key domain (``>> SHIFT``)."""
    return (sortable_key(x) >> SHIFT).to(tl.int64)


@triton.jit
def _stats_kernel(
    logits_ptr,
    stride_b,
    stride_j,
    temp_ptr,
    gkey_ptr,
    gidx_ptr,
    zmax_ptr,
    kmin_ptr,
    kmax_ptr,
    V,
    K1,
    n_splits,
    SPLIT: tl.constexpr,
    BLOCK: tl.constexpr,
    SHIFT: tl.constexpr,
):
    """Per (row, split): greedy argmax key and index, max of ``x / T``, min and max key."""
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    b = row // K1
    t = tl.load(temp_ptr + b).to(tl.float32)
    inv_t = 1.0 / tl.where(t > 0, t, 1.0)
    base = logits_ptr + b * stride_b + (row % K1) * stride_j
    g_best = tl.full([BLOCK], -2147483648, tl.int32)
    g_idx = tl.zeros([BLOCK], tl.int32)
    k_min = tl.full([BLOCK], 2147483647, tl.int32)
    z_max = tl.full([BLOCK], float("-inf"), tl.float32)
    start = sp.to(tl.int64) * SPLIT
    for i in range(0, SPLIT, BLOCK):
        offs = start + i + tl.arange(0, BLOCK)
        inb = offs < V
        x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
        g_best, g_idx, key = track_argmax(g_best, g_idx, x, inb, offs)
        k_min = tl.minimum(k_min, tl.where(inb, key >> SHIFT, 2147483647))
        z_max = tl.maximum(z_max, x * inv_t)
    out = row * n_splits + sp
    gk, gi = lanes_argmax(g_best, g_idx)
    tl.store(gkey_ptr + out, gk)
    tl.store(gidx_ptr + out, gi)
    tl.store(zmax_ptr + out, tl.max(z_max, axis=0))
    tl.store(kmin_ptr + out, tl.min(k_min, axis=0))
    tl.store(kmax_ptr + out, gk >> SHIFT)


@triton.jit
def bucket_log2(lo, hi):
    """log2 of the bucket width of ``[lo, hi)``: the least power of two with 16 buckets covering it."""
    s = lo * 0
    while (NBINS << s) < hi - lo:
        s += 1
    return s


@triton.jit
def _narrow(lo, hi, g_hi, hist, target):
    """One bisection step: ``hist`` holds the sums of the 16 buckets of ``[lo, hi)``. Returns the bucket
    ``[lo', hi')`` with ``G(lo') >= target > G(hi')`` and ``G(hi')``."""
    step = 1 << bucket_log2(lo, hi)
    bins = tl.arange(0, NBINS)
    g = g_hi + (tl.sum(hist, axis=0) - tl.cumsum(hist, axis=0) + hist)  # G(lo + step * bin)
    valid = lo + step * bins < hi
    b_lo = tl.max(tl.where(valid & (g >= target), bins, 0), axis=0)
    nb = b_lo + 1
    has_hi = (nb < NBINS) & (lo + step * nb < hi)
    g_nb = tl.sum(tl.where(bins == nb, g, 0.0), axis=0)
    return lo + step * b_lo, tl.where(has_hi, lo + step * nb, hi), tl.where(has_hi, g_nb, g_hi)


@triton.jit
def _settle(lo, hi, g_hi, phase, k_max, top_p):
    """Phase changes once an interval has shrunk to one key: top-k done -> top-p over [cut_k, k_max]
    (or done when top-p is off); top-p done -> done. The cut is then ``lo``."""
    to_p = (phase == TOPK) & (hi - lo <= 1)
    hi = tl.where(to_p, k_max + 1, hi)
    g_hi = tl.where(to_p, 0.0, g_hi)
    phase = tl.where(to_p, tl.where(top_p < 1.0, TOPP_START, DONE), phase)
    phase = tl.where((phase != TOPK) & (hi - lo <= 1), DONE, phase)
    return hi, g_hi, phase


@triton.jit
def _kth_largest(keys, valid, k, lo, hi):
    """The k-th largest of int32 ``keys`` where ``valid``, given ``count(keys >= lo) >= k`` and
    ``count(keys >= hi) < k`` (int64 scalars): the largest ``c`` in ``[lo, hi)`` with ``count(keys >= c)
    >= k``, narrowed ``P_PROBES``-fold a round."""
    lo = tl.zeros_like(hi) + lo
    probes = tl.arange(0, P_PROBES).to(tl.int64) + 1
    while hi - lo > 1:
        at = tl.minimum(lo + (hi - lo + P_PROBES - 1) // P_PROBES * probes, hi)
        n = tl.sum((valid[None, :] & (keys[None, :] >= at.to(tl.int32)[:, None])).to(tl.int32), axis=1)
        lo = tl.max(tl.where(n >= k, at, lo), axis=0)
        hi = tl.min(tl.where(n >= k, hi, at), axis=0)
    return lo


@triton.jit
def _least_below(keys, w, goal, lo, hi, base, extra, extra_below):
    """The least ``c`` in ``(lo, hi]`` with ``M(c) < goal``, given ``M(lo) >= goal > M(hi)``: ``M(c)`` is
    ``base`` plus the float64 ``w`` of the int32 ``keys`` above ``c``, plus ``extra`` when ``c <
    extra_below`` (mass that lies between listed keys); ``M`` falls as ``c`` rises. ``P_PROBES`` keys a
    round."""
    probes = tl.arange(0, P_PROBES).to(tl.int64) + 1
    hi = tl.zeros_like(lo) + hi
    while hi - lo > 1:
        at = tl.minimum(lo + (hi - lo + P_PROBES - 1) // P_PROBES * probes, hi)
        mass = tl.sum(tl.where(keys[None, :] > at.to(tl.int32)[:, None], w[None, :], 0.0), axis=1)
        below = base + mass + tl.where(at < extra_below, extra, 0.0) < goal
        hi = tl.min(tl.where(below, at, hi), axis=0)
        lo = tl.max(tl.where(below, lo, at), axis=0)
    return hi


@triton.jit
def _key_value(key, SHIFT: tl.constexpr):
    """The float32 value of a row key (the inverse of :func:`row_key`; -0.0 comes back as +0.0). The
    bits ``>> SHIFT`` dropped are ones in a negative value's key (its float's are zeros)."""
    b = ((key << SHIFT) | tl.where(key < 0, (1 << SHIFT) - 1, 0)).to(tl.int32)
    return (b ^ ((b >> 31) & 0x7FFFFFFF)).to(tl.float32, bitcast=True)


@triton.jit
def _bucket_sums(base, V, lo, hi, counting, inv_t, m, SHIFT: tl.constexpr, BLOCK: tl.constexpr):
    """The 16 bucket sums of ``[lo, hi)`` over a whole row, float64: counts (``counting``) or masses."""
    shift = bucket_log2(lo, hi).to(tl.uint32)
    lo32 = lo.to(tl.int32)
    hi32 = hi.to(tl.int32)  # hi <= sortable_key(+inf) + 1 for a regular row
    bins = tl.arange(0, NBINS)
    count = tl.zeros([NBINS], tl.int32)
    mass = tl.zeros([NBINS, MASS_BLOCK], tl.float64)  # per bucket and lane; reduced once
    for i in range(0, V, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        inb = offs < V
        key = sortable_key(tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)) >> SHIFT
        live = inb & (key >= lo32) & (key < hi32)
        if counting:
            bucket = ((key - lo32).to(tl.uint32, bitcast=True) >> shift).to(tl.int32)
            count += tl.histogram(tl.where(live, bucket, 0), NBINS, mask=live)
        elif tl.max(live.to(tl.int32), axis=0) > 0:
            for q in range(0, BLOCK, MASS_BLOCK):
                o = i + q + tl.arange(0, MASS_BLOCK)[None, :]  # [1, MB]: broadcasts to the bins
                xs = tl.load(base + o, mask=o < V, other=float("-inf")).to(tl.float32)
                ks = sortable_key(xs) >> SHIFT
                ls = (o < V) & (ks >= lo32) & (ks < hi32)
                bs = tl.where(ls, ((ks - lo32).to(tl.uint32, bitcast=True) >> shift).to(tl.int32), -1)
                w = tl.where(ls, tl.exp(xs * inv_t - m), 0.0).to(tl.float64)
                mass += tl.where(bins[:, None] == bs, w, 0.0)
    return tl.where(counting, count.to(tl.float64), tl.sum(mass, axis=1))


@triton.jit
def _exact_cut_kernel(logits_ptr, stride_b, stride_j, temp_ptr, topk_ptr, topp_ptr, kmin_ptr, kmax_ptr, zmax_ptr,
                      plan_ptr, cut_ptr, V, K1, n_splits, NS_P2: tl.constexpr, SHIFT: tl.constexpr,
                      BLOCK: tl.constexpr, ROUNDS: tl.constexpr):  # fmt: skip
    """One program per row whose plan says ``EXACT`` (others return at once): the cut by bisection over the
    row's key interval, ``ROUNDS`` (:func:`num_rounds`) at most."""
    row = tl.program_id(0).to(tl.int64)
    if tl.load(plan_ptr + row * 8) == EXACT:
        b = row // K1
        sp = tl.arange(0, NS_P2)
        on = sp < n_splits
        lo = tl.min(tl.load(kmin_ptr + row * n_splits + sp, mask=on, other=2147483647), axis=0).to(tl.int64)
        k_max = tl.max(tl.load(kmax_ptr + row * n_splits + sp, mask=on, other=-2147483648), axis=0).to(tl.int64)
        m = tl.max(tl.load(zmax_ptr + row * n_splits + sp, mask=on, other=float("-inf")), axis=0)
        inv_t = 1.0 / tl.load(temp_ptr + b).to(tl.float32)
        k = tl.load(topk_ptr + b).to(tl.int64)
        top_p = tl.load(topp_ptr + b).to(tl.float64)
        phase = tl.where((k > 0) & (k < V), TOPK, TOPP_START)  # a planned row has top-k or top-p on
        hi, g_hi, phase = _settle(lo, k_max + 1, top_p * 0.0, phase, k_max, top_p)
        target = k.to(tl.float64)
        base = logits_ptr + b * stride_b + (row % K1) * stride_j
        for _ in range(0, ROUNDS):
            if phase != DONE:
                hist = _bucket_sums(base, V, lo, hi, phase == TOPK, inv_t, m, SHIFT, BLOCK)
                target = tl.where(phase == TOPP_START, top_p * (g_hi + tl.sum(hist, axis=0)), target)
                phase = tl.where(phase == TOPP_START, TOPP, phase)
                lo, hi, g_hi = _narrow(lo, hi, g_hi, hist, target)
                hi, g_hi, phase = _settle(lo, hi, g_hi, phase, k_max, top_p)
        tl.store(cut_ptr + row, lo)
