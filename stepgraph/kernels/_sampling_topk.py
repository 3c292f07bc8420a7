"""The cut-off of chain verify sampling when every filtered row has a small top-k (``1..TOP_K_MAX``).

Such a row keeps at most ``top_k`` entries plus the ties at the k-th value, so the top-p and min-p filters
(which keep an upper part of the top-k set) need only a few entries. They are found without a sort or a
radix select over the vocabulary, from a lower bound on the k-th key. Launches:

1. per (row, vocabulary split): the argmax and, for each of ``MAXIMA_PER_ROW / splits`` disjoint subsets
   of the split's entries, the largest key (the running maxima the argmax keeps anyway). A row without any
   filter, or a greedy one, gets the temperature class's per-split softmax instead;
2. one program per row: the bound ``T``, the k-th largest of the row's subset maxima. ``k`` subsets hold
   a maximum ``>= T``, so at least ``k`` entries do and the k-th key is ``>= T``; on real rows only a few
   entries more than ``k`` reach ``T``;
3. per (row, split): the split's entries ``>= T`` listed in vocabulary order (``-inf`` entries are
   counted instead: they carry no mass);
4. one program per row: the k-th key ``cut`` among the listed entries, the top-p cut among those ``>=
   cut`` (a search for the least key whose larger entries hold less than ``top_p`` of the top-k mass, in
   float64), then the kept mass of every split without the row's draft token (with min-p). Those feed the
   filtered class's last launch unchanged. In a verify, the row's sample too: the kept set is the list, so
   the sample the last launch needs of the row (were it the chain's first miss or its bonus row) is found
   here by the same number, and the last launch scans no split for it. The searches run over
   ``SMALL_LIST`` entries when the row lists no more (a top-k of tens), else over ``GATHER_CAP``. A row
   whose splits list more than ``GATHER_CAP`` entries (ties at ``T`` by the thousand) finds ``cut`` in
   this program by a radix select over the whole row instead: slower, exact.

Counts are exact integers and every float sum runs in a fixed order, so the kept set does not depend on
how a row is split (it is the same at every batch size).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._argmax import lanes_argmax, sortable_key, track_argmax
from ._common import EXACT_ROUNDING, after_previous, dependent_launch, jit_any_batch, next_pow2
from ._sampling_filter import (
    NEG_INF_KEY_C,
    key_shift,
    key_value,
    row_key,
    small_top_k_request,
    split_softmax,
    verify_stream,
)
from .chain_sampling_ref import SMALL_TOP_K_MAX

#: The largest top-k of the small top-k path: its kernels list the entries at or above a bound on the k-th
#: logit, a few more than k, so a larger k would take their slow path more often.
TOP_K_MAX = SMALL_TOP_K_MAX
CAP: tl.constexpr = tl.constexpr(TOP_K_MAX)
MAXIMA_PER_ROW = 4096  # subset maxima per row (>= 2 * TOP_K_MAX: a row's splits keep at least half of them)
GATHER_CAP = 2048  # entries >= T one row may list (a power of 2 >= TOP_K_MAX); past it, the radix select
SMALL_LIST = 512  # a row listing at most this many entries (a top-k of tens) searches a list this wide
ONE_GATHER: tl.constexpr = tl.constexpr(SMALL_LIST)  # lists this wide are loaded at once (:func:`_gathered`)
PASS_BLOCK, PASS_WARPS = 1024, 4  # entries per step (divides every split) and warps of the vocabulary passes
CUT_WARPS = 8  # warps of the per-row program (its searches run over GATHER_CAP entries)
#: registers a thread of the per-row program may hold: two programs fit an SM. Its searches of a short list
#: (most rows) need fewer; those of a long list would take half again as many, and keep a few in memory.
CUT_REGISTERS = 128
#: keys tried at once by the searches: each round of a search sums a [P_PROBES, list] tile in one program, so
#: narrow rounds cost less than the rounds they save (`benchmarks/results/2026-12-03-h200-run45`)
P_PROBES: tl.constexpr = tl.constexpr(4)
LOWEST: tl.constexpr = tl.constexpr(-(1 << 40))  # below every key (int64)
NONE32: tl.constexpr = tl.constexpr(-2147483648)  # below every key in int32 (no NaN is canonicalised to it)
V_NONE: tl.constexpr = tl.constexpr(2147483647)  # past every vocabulary index
#: ``pick`` of a row whose sample the last launch finds by its scan: not a small top-k row, or one whose kept
#: ties at the cut are not all listed
UNLISTED: tl.constexpr = tl.constexpr(-2)


@triton.jit
def _ukey(x, SHIFT: tl.constexpr):
    """Unsigned key of float32 ``x`` in ``[0, 2**(32 - SHIFT))``, in the order of :func:`row_key`."""
    return (sortable_key(x) ^ -2147483648).to(tl.uint32, bitcast=True) >> SHIFT


@triton.jit
def _is_candidate_row(temp_ptr, topk_ptr, b):
    """A sampled row whose top-k is on and small: its kept set is found among its listed entries."""
    return small_top_k_request(tl.load(temp_ptr + b), tl.load(topk_ptr + b).to(tl.int64))


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
def _list_selected(out, n, offs, sel, GCAP: tl.constexpr):
    """Appends the block's ``offs`` where ``sel`` to the list ``out`` holding ``n`` entries (the first
    ``GCAP`` are kept, in order); returns the new count. A block with nothing selected costs one sum."""
    count = tl.sum(sel.to(tl.int32), axis=0)
    if count > 0:
        pos = n + tl.cumsum(sel.to(tl.int32), axis=0) - 1
        tl.store(out + pos, offs, mask=sel & (pos < GCAP))
    return n + count


@triton.jit
def split_maxima(base, start, V, SPLIT, BLOCK: tl.constexpr, M: tl.constexpr, maxima_out):
    """Over ``[start, start + SPLIT) ∩ [0, V)``: ``(argmax key, its lowest index)``, and the ``M`` subset
    maxima stored at ``maxima_out``: the largest key of each subset of lanes (the running maxima the
    argmax keeps anyway)."""
    g_best = tl.full([BLOCK], -2147483648, tl.int32)
    g_idx = tl.zeros([BLOCK], tl.int32)
    for i in range(0, SPLIT, BLOCK):
        offs = start + i + tl.arange(0, BLOCK)
        inb = offs < V
        x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
        g_best, g_idx, _ = track_argmax(g_best, g_idx, x, inb, offs)
    # lane l's running maximum covers entries l, l + BLOCK, ...: subset s is lanes [s * BLOCK / M, ...)
    tl.store(maxima_out + tl.arange(0, M), tl.max(tl.reshape(g_best, [M, BLOCK // M]), axis=1))
    return lanes_argmax(g_best, g_idx)


@jit_any_batch
def _stats_kernel(logits_ptr, stride_b, stride_j, draft_ptr, stride_draft, temp_ptr, topk_ptr, gkey_ptr, gidx_ptr,
                  m_ptr, s_ptr, maxima_ptr, V, K, K1, n_splits, SPLIT, BLOCK: tl.constexpr,
                  M: tl.constexpr, GDC: tl.constexpr):  # fmt: skip
    """Launch 1, per (row, split): argmax; the ``M`` subset maxima (candidate rows) or the split's softmax
    partials ``m = max z``, ``sum exp(z - m)`` without the draft token (other rows)."""
    if GDC:  # a dependent launch: the kernel before it has ended first
        after_previous()
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    b = row // K1
    j = row % K1
    base = logits_ptr + b * stride_b + j * stride_j
    start = sp * SPLIT  # int32 offsets in the row: cheaper per entry
    out = row * n_splits + sp
    if _is_candidate_row(temp_ptr, topk_ptr, b):
        gk, gi = split_maxima(base, start, V, SPLIT, BLOCK, M, maxima_ptr + out * M)
        tl.store(gkey_ptr + out, gk)
        tl.store(gidx_ptr + out, gi)
    else:
        t = tl.load(temp_ptr + b).to(tl.float32)
        inv_t = 1.0 / tl.where(t > 0, t, 1.0)
        excl = tl.load(draft_ptr + b * stride_draft + j, mask=j < K, other=-1).to(tl.int64)
        gk, gi, m, s = split_softmax(base, start, V, tl.where(j < K, excl, -1), inv_t, SPLIT, BLOCK)
        tl.store(gkey_ptr + out, gk)
        tl.store(gidx_ptr + out, gi)
        tl.store(m_ptr + out, m)
        tl.store(s_ptr + out, s)


@triton.jit
def _descend(h, k_rem, DIGIT: tl.constexpr):
    """One radix level: from its histogram ``h`` and the entries still to place ``k_rem`` to ``(digit of
    the k-th key, k_rem below it, count equal to it at this level)``."""
    bins = tl.arange(0, 1 << DIGIT)
    g = tl.sum(h, axis=0) - tl.cumsum(h, axis=0) + h  # entries in bins >= b
    d = tl.max(tl.where(g >= k_rem, bins, 0), axis=0)
    g_d = tl.sum(tl.where(bins == d, g, 0), axis=0)
    h_d = tl.sum(tl.where(bins == d, h, 0), axis=0)
    return d, k_rem - (g_d - h_d), h_d


@triton.jit
def _kth_largest_by_digits(keys, valid, k, BITS: tl.constexpr):
    """The k-th largest of ``keys`` where ``valid`` (at least k of them): signed keys of ``BITS`` bits (int32
    row keys ``>> (32 - BITS)``), found by a radix descent over 8-bit digits, a histogram a digit."""
    DIGIT: tl.constexpr = 8
    u = ((keys << (32 - BITS)) ^ -2147483648).to(tl.uint32, bitcast=True) >> (32 - BITS)
    prefix = (k * 0).to(tl.uint32)
    k_rem = k
    for level in tl.static_range(BITS // DIGIT):
        low = BITS - DIGIT * level - DIGIT
        live = valid
        if level > 0:
            live = valid & ((u >> (low + DIGIT)) == prefix)
        hist = tl.histogram(((u >> low) & ((1 << DIGIT) - 1)).to(tl.int32), 1 << DIGIT, mask=live)
        d, k_rem, _ = _descend(hist, k_rem, DIGIT)
        prefix = (prefix << DIGIT) | d.to(tl.uint32)
    return prefix.to(tl.int64) - (1 << (BITS - 1))


@jit_any_batch
def _bound_kernel(temp_ptr, topk_ptr, maxima_ptr, bound_ptr, V, K1, n_splits, M: tl.constexpr,
                  MAXIMA: tl.constexpr, SHIFT: tl.constexpr, GDC: tl.constexpr):  # fmt: skip
    """Launch 2, one program per candidate row: :func:`row_bound`."""
    if GDC:  # a dependent launch: the kernel before it has ended first
        after_previous()
    row = tl.program_id(0).to(tl.int64)
    if _is_candidate_row(temp_ptr, topk_ptr, row // K1):
        row_bound(topk_ptr, maxima_ptr, bound_ptr, row, V, K1, n_splits, M, MAXIMA, SHIFT)


@triton.jit
def row_bound(topk_ptr, maxima_ptr, bound_ptr, row, V, K1, n_splits, M: tl.constexpr, MAXIMA: tl.constexpr,
              SHIFT: tl.constexpr):  # fmt: skip
    """The bound ``T`` of a candidate row, the k-th largest of its subset maxima, stored. A top-k of at most
    ``TOP_K_MAX / 4`` takes the maxima of four adjacent subsets (in one split) at a time: a quarter of the
    keys to search, and still a few more than k entries reach the bound."""
    k = tl.minimum(tl.load(topk_ptr + row // K1), V).to(tl.int64)
    c = tl.arange(0, MAXIMA)
    has = c // M < n_splits
    mx = tl.load(maxima_ptr + row * n_splits * M + c, mask=has, other=NONE32) >> SHIFT
    if k * 4 <= CAP:
        fours = tl.arange(0, MAXIMA // 4) * 4
        bound = _kth_largest_by_digits(tl.max(tl.reshape(mx, [MAXIMA // 4, 4]), axis=1), fours // M < n_splits, k,
                                       32 - SHIFT)  # fmt: skip
    else:
        bound = _kth_largest_by_digits(mx, has, k, 32 - SHIFT)
    tl.store(bound_ptr + row, bound.to(tl.int32))


@jit_any_batch
def _gather_kernel(logits_ptr, stride_b, stride_j, temp_ptr, topk_ptr, bound_ptr, list_ptr, count_ptr, ninf_ptr, V,
                   K1, n_splits, SPLIT, BLOCK: tl.constexpr, SHIFT: tl.constexpr,
                   GCAP: tl.constexpr, GDC: tl.constexpr):  # fmt: skip
    """Launch 3, per (row, split) of a candidate row: :func:`list_split`."""
    if GDC:  # a dependent launch: the kernel before it has ended first
        after_previous()
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    if _is_candidate_row(temp_ptr, topk_ptr, row // K1):
        list_split(logits_ptr, stride_b, stride_j, bound_ptr, list_ptr, count_ptr, ninf_ptr, row, sp, V, K1,
                   n_splits, SPLIT, BLOCK, SHIFT, GCAP)  # fmt: skip


@triton.jit
def list_split(logits_ptr, stride_b, stride_j, bound_ptr, list_ptr, count_ptr, ninf_ptr, row, sp, V, K1, n_splits,
               SPLIT, BLOCK: tl.constexpr, SHIFT: tl.constexpr, GCAP: tl.constexpr):  # fmt: skip
    """A candidate row's split ``sp``: its entries ``>= T`` (``-inf`` ones aside) listed in vocabulary order
    (the first ``GCAP``), their count, and the split's count of ``-inf`` entries when ``T`` is ``-inf``."""
    b = row // K1
    bound = tl.load(bound_ptr + row)
    neg_inf = NEG_INF_KEY_C >> SHIFT
    thresh = tl.maximum(bound, neg_inf + 1)
    count_inf = bound <= neg_inf
    base = logits_ptr + b * stride_b + (row % K1) * stride_j
    out = list_ptr + (row * n_splits + sp) * GCAP
    start = sp * SPLIT  # int32 offsets in the row: cheaper per entry
    end = tl.minimum(start + SPLIT, V)
    n = sp * 0
    n_inf = sp * 0
    for i in range(0, SPLIT, BLOCK):
        offs = start + i + tl.arange(0, BLOCK)
        inb = offs < end
        key = sortable_key(tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)) >> SHIFT
        n = _list_selected(out, n, offs, inb & (key >= thresh), GCAP)
    if count_inf:  # rare (fewer finite subset maxima than k): a second look at the split
        for i in range(0, SPLIT, BLOCK):
            offs = start + i + tl.arange(0, BLOCK)
            inb = offs < end
            key = sortable_key(tl.load(base + offs, mask=inb, other=0.0).to(tl.float32)) >> SHIFT
            n_inf += tl.sum((inb & (key == neg_inf)).to(tl.int32), axis=0)
    tl.store(count_ptr + row * n_splits + sp, n)
    tl.store(ninf_ptr + row * n_splits + sp, n_inf)


@triton.jit
def _row_radix_list(base, V, k, out, NS_P2: tl.constexpr, SPLIT, BLOCK: tl.constexpr,
                    SHIFT: tl.constexpr, BITS: tl.constexpr, GCAP: tl.constexpr):  # fmt: skip
    """The slow path, in one program: the k-th key ``cut`` of the row by a radix select over all its
    entries (8-bit digits), then the entries ``>= cut`` listed in ``out`` in vocabulary order, or only
    those ``> cut`` when the ties would overflow ``GCAP``; the ties are then counted per split. Returns
    ``(entries listed, cut as a row key, unlisted ties, unlisted ties per split [NS_P2])``."""
    DIGIT: tl.constexpr = 8
    prefix = (k * 0).to(tl.uint32)
    k_rem = k
    n_eq = k
    for level in tl.static_range(BITS // DIGIT):
        low = BITS - DIGIT * level - DIGIT
        hist = tl.zeros([1 << DIGIT], tl.int32)
        for i in range(0, V, BLOCK):
            offs = i + tl.arange(0, BLOCK)
            inb = offs < V
            u = _ukey(tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32), SHIFT)
            live = inb
            if level > 0:
                live = inb & ((u >> (low + DIGIT)) == prefix)
            hist += tl.histogram(((u >> low) & ((1 << DIGIT) - 1)).to(tl.int32), 1 << DIGIT, mask=live)
        d, k_rem, n_eq = _descend(hist, k_rem, DIGIT)
        prefix = (prefix << DIGIT) | d.to(tl.uint32)
    unlisted = k - k_rem + n_eq > GCAP
    thresh = tl.where(unlisted, prefix + 1, prefix)  # prefix < the largest key: NaNs are canonicalised
    sps = tl.arange(0, NS_P2)
    ties = tl.zeros([NS_P2], tl.int32)
    n = (k * 0).to(tl.int32)
    for i in range(0, V, BLOCK):
        offs = i + tl.arange(0, BLOCK)
        inb = offs < V
        u = _ukey(tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32), SHIFT)
        n = _list_selected(out, n, offs, inb & (u >= thresh), GCAP)
        if unlisted:  # a block lies in one split (BLOCK divides SPLIT)
            ties += tl.where(sps == i // SPLIT, tl.sum((inb & (u == prefix)).to(tl.int32), axis=0), 0)
    cut = prefix.to(tl.int64) - (1 << (BITS - 1))
    return n, cut, tl.where(unlisted, n_eq, 0).to(tl.int64), ties


@triton.jit
def _gathered(list_ptr, count_ptr, row, n_splits, NS_P2: tl.constexpr, GCAP: tl.constexpr, WIDTH: tl.constexpr):
    """The row's listed entries (launch 3's per-split lists of ``GCAP`` slots), one split after another:
    ``(idx [WIDTH] int32, valid [WIDTH])`` for a row that lists at most ``WIDTH`` in all. A short list
    (``WIDTH <= SMALL_LIST``) is loaded at once: position ``c`` lies in the split ``q`` whose list ends past
    it, and ``q`` counts the lists ending at or before ``c`` (a histogram of the ends, summed). A long one is
    loaded a split at a time: a histogram of ``GCAP`` bins costs more than the loop."""
    c = tl.arange(0, WIDTH)
    if WIDTH <= ONE_GATHER:
        sps = tl.arange(0, NS_P2)
        n = tl.load(count_ptr + row * n_splits + sps, mask=sps < n_splits, other=0)
        ends = tl.cumsum(n, axis=0)
        valid = c < tl.sum(n, axis=0)
        q = tl.where(valid, tl.cumsum(tl.histogram(ends, WIDTH, mask=(sps < n_splits) & (ends < WIDTH)), axis=0), 0)
        start = tl.gather(ends - n, q, 0)
        idx = tl.load(list_ptr + (row * n_splits + q) * GCAP + c - start, mask=valid, other=0)
    else:
        idx = tl.zeros([WIDTH], tl.int32)
        first = n_splits * 0
        for q in range(0, n_splits):  # a loop over splits keeps the registers at one list's width
            n_q = tl.load(count_ptr + row * n_splits + q)
            here = (c >= first) & (c < first + n_q)
            idx = tl.where(here, tl.load(list_ptr + (row * n_splits + q) * GCAP + c - first, mask=here, other=0), idx)
            first += n_q
        valid = c < first
    return idx, valid


@triton.jit
def _listed_cut(logits_row, list_ptr, count_ptr, ninf_ptr, bound_ptr, row, k, n_splits, NS_P2: tl.constexpr,
                SHIFT: tl.constexpr, GCAP: tl.constexpr, WIDTH: tl.constexpr):  # fmt: skip
    """The k-th key ``cut`` among the listed entries (at most ``WIDTH``). Returns ``(idx, valid, x, key,
    cut, unlisted ties, unlisted ties per split [NS_P2])``: the ties are the ``-inf`` entries when fewer
    than k are finite, which the lists leave out."""
    sps = tl.arange(0, NS_P2)
    ninf = tl.load(ninf_ptr + row * n_splits + sps, mask=sps < n_splits, other=0)
    bound = tl.load(bound_ptr + row).to(tl.int64)
    idx, valid = _gathered(list_ptr, count_ptr, row, n_splits, NS_P2, GCAP, WIDTH)
    idx = idx.to(tl.int64)
    x = tl.load(logits_row + idx, mask=valid, other=float("-inf")).to(tl.float32)
    key = tl.where(valid, sortable_key(x) >> SHIFT, NONE32)
    enough = tl.sum(valid.to(tl.int32), axis=0) >= k  # else the k-th key is -inf: every -inf entry ties at it
    cut = k * 0 + (NEG_INF_KEY_C >> SHIFT)
    if enough:  # every listed key is >= the gather's threshold
        lo = tl.maximum(bound, cut + 1)
        cut = _kth_largest(key, valid, k, lo, tl.max(key, axis=0).to(tl.int64) + 1)
    n_ties = tl.where(enough, 0, tl.sum(ninf, axis=0)).to(tl.int64)
    return idx, valid, x, key, cut, n_ties, tl.where(enough, 0, ninf)


@triton.jit
def _radix_cut(logits_row, list_ptr, row, k, V, n_splits, NS_P2: tl.constexpr, SPLIT, BLOCK: tl.constexpr,
               SHIFT: tl.constexpr, BITS: tl.constexpr, GCAP: tl.constexpr):  # fmt: skip
    """:func:`_listed_cut` for a row whose lists overflow: the row's own radix select, then the entries
    ``>=`` the cut listed (ties past ``GCAP`` counted instead)."""
    c = tl.arange(0, GCAP)
    out = list_ptr + row * n_splits * GCAP
    n_listed, cut, n_ties, tie_n = _row_radix_list(logits_row, V, k, out, NS_P2, SPLIT, BLOCK, SHIFT, BITS, GCAP)
    tl.debug_barrier()  # the list's stores are seen by every thread of the program
    valid = c < n_listed
    idx = tl.load(out + c, mask=valid, other=0).to(tl.int64)
    x = tl.load(logits_row + idx, mask=valid, other=float("-inf")).to(tl.float32)
    key = tl.where(valid, sortable_key(x) >> SHIFT, NONE32)
    return idx, valid, x, key, cut, n_ties, tie_n


@triton.jit
def _split_sums(running, valid, split_of, scratch, NS_P2: tl.constexpr):
    """Per split, the float64 sum of values over positions ``valid`` in split ``split_of`` ([W] int32,
    not decreasing over the valid positions), as differences of their running sum ``running`` (kept in
    ``scratch``, W float64): ``[NS_P2]``. A sum over a register tile [W, NS_P2] would spill at W = 2048."""
    tl.store(scratch + tl.arange(0, running.shape[0]), running)
    per_split = tl.histogram(split_of, NS_P2, mask=valid)
    ends = tl.cumsum(per_split, axis=0)
    starts = ends - per_split
    tl.debug_barrier()  # the running sum is seen by every thread of the program
    at_end = tl.load(scratch + ends - 1, mask=ends > 0, other=0.0)
    return at_end - tl.load(scratch + starts - 1, mask=starts > 0, other=0.0)


@triton.jit
def _row_settings(logits_row, draft_ptr, stride_draft, temp_ptr, topp_ptr, minp_ptr, seed_ptr, offset_ptr, b, j, V, K,
                  PICK: tl.constexpr):  # fmt: skip
    """What the per-row program reads besides its list, loaded before its searches (whose reductions would
    hold back any load behind them): ``(1 / T, top_p (float64), min_p, the draft token left out (-1 on the
    bonus row), its logit, the number for the row's sample)``, the number 0 without ``PICK``."""
    inv_t = 1.0 / tl.load(temp_ptr + b).to(tl.float32)
    top_p = tl.load(topp_ptr + b).to(tl.float64)
    min_p = tl.load(minp_ptr + b).to(tl.float32)
    excl = tl.load(draft_ptr + b * stride_draft + j, mask=j < K, other=-1).to(tl.int64)
    excl = tl.where(j < K, excl, -1)
    excl_ok = (excl >= 0) & (excl < V)
    x_excl = tl.where(excl_ok, tl.load(logits_row + tl.where(excl_ok, excl, 0)).to(tl.float32), float("-inf"))
    u = inv_t * 0.0
    if PICK:
        u = tl.rand(tl.load(seed_ptr + b), verify_stream(tl.load(offset_ptr + b), K + 1) | (K + 1))
    return inv_t, top_p, min_p, excl, x_excl, u


@triton.jit
def _listed_sample(idx, kept, kept_w, running, whole, u, row, pick_ptr):
    """The row's sample were it the one the last launch samples (the chain's first rejected row, or its
    bonus row), stored at ``pick[row]``: by the request's number for the sample ``u`` (its Philox stream, as
    the last launch draws it), the first kept entry in vocabulary order whose running weight (float64,
    ``running``) passes that number times the kept mass, or the last one of positive weight where float
    sums leave none; -1 when nothing is kept. The listed entries are in vocabulary order. A row whose
    list is not ``whole`` (kept ties left out) gets :data:`UNLISTED`: the last launch scans its split."""
    goal = u.to(tl.float64) * tl.max(running, axis=0)
    hit = tl.min(tl.where(kept & (running > goal), idx, V_NONE), axis=0)
    last = tl.max(tl.where(kept & (kept_w > 0), idx, -1), axis=0)
    tl.store(pick_ptr + row, tl.where(whole, tl.where(hit < V_NONE, hit, last), UNLISTED))


@triton.jit
def _cut_and_mass(idx, valid, x, key, cut, n_ties, tie_n, settings, row, pick_ptr, scratch_ptr, m_ptr, s_ptr, cut_ptr,
                  V, n_splits, SPLIT, NS_P2: tl.constexpr, SHIFT: tl.constexpr, GCAP: tl.constexpr,
                  PICK: tl.constexpr):  # fmt: skip
    """From the listed entries and the k-th key ``cut``: the top-p cut among those ``>= cut``, then the
    kept mass of every split without the draft token (min-p applied), ``m`` and the cut, stored. With
    ``PICK``, the row's sample too (:func:`_listed_sample`). ``settings``: :func:`_row_settings`."""
    inv_t, top_p, min_p, excl, x_excl, u = settings
    sps = tl.arange(0, NS_P2)
    listed = valid & (key >= cut)
    top = tl.max(tl.where(listed, key, NONE32), axis=0).to(tl.int64)
    top = tl.where(top > NONE32, top, cut)  # the row's largest key
    m = key_value(top, SHIFT) * inv_t  # max z, as the reference computes it (z rises with the key)
    w = tl.where(listed, tl.exp(x * inv_t - m), 0.0)
    w_tie = tl.exp(key_value(cut, SHIFT) * inv_t - m)
    cut_p = cut
    if top_p < 1.0:
        # M(c), the mass of listed entries with a key > c, falls as c rises; an entry is kept when
        # M(its key) < goal. Find the least such c in (cut - 1, top] with P_PROBES probes a round.
        w64 = w.to(tl.float64)
        goal = top_p * (tl.sum(w64, axis=0) + n_ties.to(tl.float64) * w_tie.to(tl.float64))
        lo = cut - 1  # M(lo) is the whole top-k mass: >= goal
        hi = top  # M(top) = 0 < goal
        probes = tl.arange(0, P_PROBES).to(tl.int64) + 1
        while hi - lo > 1:
            at = tl.minimum(lo + (hi - lo + P_PROBES - 1) // P_PROBES * probes, hi)
            below = tl.sum(tl.where(key[None, :] > at.to(tl.int32)[:, None], w64[None, :], 0.0), axis=1) < goal
            hi = tl.min(tl.where(below, at, hi), axis=0)
            lo = tl.max(tl.where(below, lo, at), axis=0)
        cut_p = tl.min(tl.where(listed & (key >= hi), key, 2147483647), axis=0).to(tl.int64)  # least kept
        cut_p = tl.where((n_ties > 0) & (hi <= cut), cut, cut_p)
    kept = listed & (key >= cut_p) & (w >= min_p) & (idx != excl)
    # the entries are listed in vocabulary order: each split's are one run of positions
    kept_w = tl.where(kept, w, 0.0)
    running = tl.cumsum(kept_w.to(tl.float64), axis=0)
    tie_kept = (cut >= cut_p) & (w_tie >= min_p)  # the unlisted ties at the cut (if any) are kept
    if PICK:
        whole = (n_ties == 0) | ~tie_kept | (w_tie <= 0)  # the list holds every kept entry of weight
        _listed_sample(idx, kept, kept_w, running, whole, u, row, pick_ptr)
    mass = _split_sums(running, valid, (idx // SPLIT).to(tl.int32), scratch_ptr + row * GCAP, NS_P2).to(tl.float32)
    excl_tie = (n_ties > 0) & (excl >= 0) & (excl < V) & (row_key(x_excl, SHIFT) == cut)  # the draft is an unlisted tie
    tie_n -= (excl_tie & (sps == excl // SPLIT)).to(tie_n.dtype)
    mass += tl.where(tie_kept, tie_n.to(tl.float32) * w_tie, 0.0)
    tl.store(m_ptr + row * n_splits + sps, tl.zeros([NS_P2], tl.float32) + m, mask=sps < n_splits)
    tl.store(s_ptr + row * n_splits + sps, mass, mask=sps < n_splits)
    tl.store(cut_ptr + row, cut_p)


@triton.jit
def _listed_cut_and_mass(logits_row, list_ptr, count_ptr, ninf_ptr, bound_ptr, k, settings, row, pick_ptr, scratch_ptr,
                         m_ptr, s_ptr, cut_ptr, V, n_splits, SPLIT, NS_P2: tl.constexpr, SHIFT: tl.constexpr,
                         GCAP: tl.constexpr, WIDTH: tl.constexpr, PICK: tl.constexpr):  # fmt: skip
    """:func:`_listed_cut`, then :func:`_cut_and_mass`, for a row listing at most ``WIDTH`` entries."""
    idx, valid, x, key, cut, n_ties, tie_n = _listed_cut(logits_row, list_ptr, count_ptr, ninf_ptr, bound_ptr, row, k,
                                                         n_splits, NS_P2, SHIFT, GCAP, WIDTH)  # fmt: skip
    _cut_and_mass(idx, valid, x, key, cut, n_ties, tie_n, settings, row, pick_ptr, scratch_ptr, m_ptr, s_ptr, cut_ptr,
                  V, n_splits, SPLIT, NS_P2, SHIFT, GCAP, PICK)  # fmt: skip


@jit_any_batch
def _cut_kernel(logits_ptr, stride_b, stride_j, draft_ptr, stride_draft, temp_ptr, topk_ptr, topp_ptr, minp_ptr,
                seed_ptr, offset_ptr, pick_ptr, bound_ptr, list_ptr, count_ptr, ninf_ptr, scratch_ptr, m_ptr, s_ptr,
                cut_ptr, V, K, K1, n_splits, SPLIT, BLOCK: tl.constexpr, NS_P2: tl.constexpr, SHIFT: tl.constexpr,
                BITS: tl.constexpr, GCAP: tl.constexpr, SMALL: tl.constexpr, PICK: tl.constexpr,
                GDC: tl.constexpr):  # fmt: skip
    """Launch 4, one program per row: the k-th key, the top-p cut, then the kept mass of every split
    without the draft token (min-p applied), and ``m``, for the last launch; with ``PICK``, the row's
    sample from its list (:func:`_listed_sample`). A row listing at most ``SMALL`` entries searches a list
    that wide. Other rows: the cut lets all through, and their sample is left to the last launch."""
    if GDC:  # a dependent launch: the kernel before it has ended first
        after_previous()
    row = tl.program_id(0).to(tl.int64)
    b = row // K1
    j = row % K1
    if _is_candidate_row(temp_ptr, topk_ptr, b):
        k = tl.minimum(tl.load(topk_ptr + b), V).to(tl.int64)
        logits_row = logits_ptr + b * stride_b + j * stride_j
        settings = _row_settings(logits_row, draft_ptr, stride_draft, temp_ptr, topp_ptr, minp_ptr, seed_ptr,
                                 offset_ptr, b, j, V, K, PICK)  # fmt: skip
        sps = tl.arange(0, NS_P2)
        total = tl.sum(tl.load(count_ptr + row * n_splits + sps, mask=sps < n_splits, other=0), axis=0)
        if total <= SMALL:
            _listed_cut_and_mass(logits_row, list_ptr, count_ptr, ninf_ptr, bound_ptr, k, settings, row, pick_ptr,
                                 scratch_ptr, m_ptr, s_ptr, cut_ptr, V, n_splits, SPLIT, NS_P2, SHIFT, GCAP, SMALL,
                                 PICK)  # fmt: skip
        elif total <= GCAP:  # the entries >= T: each split's list, one after another
            _listed_cut_and_mass(logits_row, list_ptr, count_ptr, ninf_ptr, bound_ptr, k, settings, row, pick_ptr,
                                 scratch_ptr, m_ptr, s_ptr, cut_ptr, V, n_splits, SPLIT, NS_P2, SHIFT, GCAP, GCAP,
                                 PICK)  # fmt: skip
        else:  # more than GCAP entries reach T: the row's own radix select
            idx, valid, x, key, cut, n_ties, tie_n = _radix_cut(logits_row, list_ptr, row, k, V, n_splits, NS_P2,
                                                                SPLIT, BLOCK, SHIFT, BITS, GCAP)  # fmt: skip
            _cut_and_mass(idx, valid, x, key, cut, n_ties, tie_n, settings, row, pick_ptr, scratch_ptr, m_ptr, s_ptr,
                          cut_ptr, V, n_splits, SPLIT, NS_P2, SHIFT, GCAP, PICK)  # fmt: skip
    else:
        tl.store(cut_ptr + row, LOWEST)
        if PICK:
            tl.store(pick_ptr + row, row * 0 + UNLISTED)


def maxima_per_split(n_splits: int) -> int:
    """Subset maxima a split keeps (:func:`split_maxima`'s ``M``): ``MAXIMA_PER_ROW`` over the splits rounded
    up to a power of two, at most a lane's maximum each."""
    return min(PASS_BLOCK, MAXIMA_PER_ROW // next_pow2(n_splits))


def list_buffers(rows: int, n_splits: int, device) -> tuple[torch.Tensor, ...]:
    """The small top-k path's workspace ``(maxima, bound, listed, counts, ninf, scratch)``: ``maxima [rows,
    n_splits, M]`` int32 subset maxima, ``bound [rows]`` int32, ``listed [rows, n_splits, GATHER_CAP]`` int32
    entries, ``counts`` and ``ninf [rows, n_splits]`` int32 (entries listed, ``-inf`` entries counted) and
    ``scratch [rows, GATHER_CAP]`` float64."""
    maxima = torch.empty((rows, n_splits, maxima_per_split(n_splits)), dtype=torch.int32, device=device)
    bound = torch.empty(rows, dtype=torch.int32, device=device)
    listed = torch.empty((rows, n_splits, GATHER_CAP), dtype=torch.int32, device=device)
    counts, ninf = (torch.empty((rows, n_splits), dtype=torch.int32, device=device) for _ in range(2))
    scratch = torch.empty((rows, GATHER_CAP), dtype=torch.float64, device=device)
    return maxima, bound, listed, counts, ninf, scratch


def row_cuts(logits, drafts, temperature, top_k, top_p, min_p, layout, m_part, s_part, listed, cut, sample=None,
             dependent=True) -> None:  # fmt: skip
    """Launch 4 (:func:`_cut_kernel`) over ``listed`` (:func:`list_buffers`' workspace after ``maxima``,
    with the lists made): the cut ``[rows]`` and ``m_part``, ``s_part`` (``[rows, n_splits]``) of every
    candidate row; the other rows' cut lets all through. ``sample``: ``None``, or ``(seed, offset, pick)``
    (``[B]`` int64 each, and ``[rows]`` int64): each candidate row's sample from its list into ``pick``
    (:func:`_listed_sample`; :data:`UNLISTED` for the rows the last launch scans)."""
    B, K1, V = logits.shape
    n_splits, split = layout
    shift = key_shift(logits.dtype)
    bound, lists, counts, ninf, scratch = listed
    seed, offset, pick = sample if sample is not None else (cut,) * 3  # unused without it
    _cut_kernel[(B * K1,)](logits, logits.stride(0), logits.stride(1), drafts, drafts.stride(0), temperature, top_k,
                           top_p, min_p, seed, offset, pick, bound, lists, counts, ninf, scratch, m_part, s_part, cut,
                           V, K1 - 1, K1, n_splits, SPLIT=split, BLOCK=PASS_BLOCK, NS_P2=next_pow2(n_splits),
                           SHIFT=shift, BITS=32 - shift, GCAP=GATHER_CAP, SMALL=min(SMALL_LIST, GATHER_CAP),
                           PICK=sample is not None, num_warps=CUT_WARPS, maxnreg=CUT_REGISTERS,
                           **EXACT_ROUNDING, **dependent_launch(logits, dependent))  # fmt: skip


def topk_mass(logits, drafts, temperature, top_k, top_p, min_p, layout, m_part, s_part, gkey, gidx, *, sample=None,
              dependent=True):  # fmt: skip
    """The small-top-k class up to the kept mass (:func:`filtered_mass`'s contract): fills ``m_part``,
    ``s_part``, ``gkey``, ``gidx`` (``[rows, n_splits]``) and returns the cut keys ``[rows]``; with
    ``sample`` (:func:`row_cuts`), each candidate row's sample from its list too. ``dependent``: every
    launch a programmatic dependent of the kernel before it (:func:`._common.dependent_launch`)."""
    B, K1, V = logits.shape
    rows, dev = B * K1, logits.device
    n_splits, split = layout
    shift = key_shift(logits.dtype)
    ns_p2 = next_pow2(n_splits)
    per_split = maxima_per_split(n_splits)
    maxima, bound, *lists = list_buffers(rows, n_splits, dev)
    cut = torch.empty(rows, dtype=torch.int64, device=dev)
    grid = (rows, n_splits)
    head = (logits, logits.stride(0), logits.stride(1))
    draft = (drafts, drafts.stride(0))
    pdl = dependent_launch(logits, dependent)
    sizes = dict(SPLIT=split, BLOCK=PASS_BLOCK, num_warps=PASS_WARPS, **EXACT_ROUNDING, **pdl)
    _stats_kernel[grid](*head, *draft, temperature, top_k, gkey, gidx, m_part, s_part, maxima, V, K1 - 1, K1,
                        n_splits, M=per_split, **sizes)  # fmt: skip
    _bound_kernel[(rows,)](temperature, top_k, maxima, bound, V, K1, n_splits, M=per_split, MAXIMA=per_split * ns_p2,
                           SHIFT=shift, num_warps=8, **EXACT_ROUNDING, **pdl)  # fmt: skip
    _gather_kernel[grid](*head, temperature, top_k, bound, *lists[:3], V, K1, n_splits, SHIFT=shift,
                         GCAP=GATHER_CAP, **sizes)  # fmt: skip
    row_cuts(logits, drafts, temperature, top_k, top_p, min_p, layout, m_part, s_part, (bound, *lists), cut, sample,
             dependent)  # fmt: skip
    return cut
