"""The cut-off of chain verify sampling when every filtered row has a small top-k (``1..TOP_K_MAX``).

Such a row keeps at most ``top_k`` entries plus the ties at the k-th value, so the top-p and min-p filters
(which keep an upper part of the top-k set) need only those few entries. The k-th key is found by a radix
select over the row's sortable keys (``BITS = 16`` for bfloat16, else 32) in digits of ``DIGIT`` bits (8
for a few rows, where launches dominate; 4 for many, where the per-entry cost of a 256-bin histogram
does). Launches:

1. per (row, vocabulary split): the argmax and the count histogram of the key's top digit (a row without
   any filter, or a greedy one, gets the temperature class's per-split softmax instead);
2. ``BITS / DIGIT - 1`` radix levels, per (row, split): the histogram of the next digit of the keys that
   share the k-th key's leading digits, settled from the previous level's histograms of every split and
   the row's state before it (leading digits, entries still to place, entries above them per split);
3. per (row, split): the k-th key ``cut`` is now exact, and so is the number of entries of every split
   at or above it; each split writes the indices of those entries into the row's dense candidate list, in
   vocabulary order (offsets from the histograms, no atomics). When ties push the count past
   ``TOP_K_MAX``, only the entries strictly above ``cut`` are listed and the ties are counted per split;
4. one program per row: top-p over the candidates (a search for the least key whose larger candidates
   hold less than ``top_p`` of the top-k mass, in float64; the unlisted ties as one group), then the kept
   mass of every split without the row's draft token (with min-p). Those feed the filtered class's last
   launch unchanged.

Counts are exact integers and every float sum runs in a fixed order, so the kept set does not depend on
how a row is split (it is the same at every batch size).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from stepgraph.keys import SMALL_TOP_K_MAX

from ._argmax import lanes_argmax, sortable_key, track_argmax
from ._common import next_pow2
from ._sampling_filter import key_shift, row_key
from ._sampling_mass import split_softmax

TOP_K_MAX = SMALL_TOP_K_MAX  # candidates per row; the TOP_K class holds requests with 1 <= top_k <= TOP_K_MAX
CAP: tl.constexpr = tl.constexpr(TOP_K_MAX)
RADIX8_MAX_ROWS = 8  # see radix_digit (run 18: 8-bit digits win at 8 rows, 4-bit at 16)
PASS_BLOCK, PASS_WARPS = 1024, 4  # entries per step (divides every split) and warps of the vocabulary passes
P_PROBES: tl.constexpr = tl.constexpr(16)  # cut-offs tried at once by the top-p search


@triton.jit
def _ukey(x, SHIFT: tl.constexpr):
    """Unsigned key of float32 ``x`` in ``[0, 2**(32 - SHIFT))``, in the order of :func:`row_key`."""
    return (sortable_key(x) ^ -2147483648).to(tl.uint32, bitcast=True) >> SHIFT


@triton.jit
def _is_candidate_row(temp_ptr, topk_ptr, b):
    """A sampled row whose top-k is on and small: its kept set is found among its candidates."""
    k = tl.load(topk_ptr + b).to(tl.int64)
    return (tl.load(temp_ptr + b) > 0) & (k >= 1) & (k <= CAP)


@triton.jit
def _level_tile(hist_ptr, level, row, n_rows, n_splits, NS_P2: tl.constexpr, DIGIT: tl.constexpr):
    """The histograms of radix level ``level`` of every split of ``row``, ``[NS_P2, 2**DIGIT]`` int32."""
    RADIX: tl.constexpr = 1 << DIGIT
    sp = tl.arange(0, NS_P2)
    p = hist_ptr + ((level * n_rows + row) * n_splits + sp[:, None]) * RADIX + tl.arange(0, RADIX)[None, :]
    return tl.load(p, mask=(sp < n_splits)[:, None], other=0)


@triton.jit
def _descend(tile, k_rem, DIGIT: tl.constexpr):
    """One radix level: from its histograms and the entries still to place ``k_rem`` to ``(digit of the
    k-th key, k_rem below it, count equal to it at this level)``."""
    bins = tl.arange(0, 1 << DIGIT)
    h = tl.sum(tile, axis=0)
    g = tl.sum(h, axis=0) - tl.cumsum(h, axis=0) + h  # entries in bins >= b
    d = tl.max(tl.where(g >= k_rem, bins, 0), axis=0)
    g_d = tl.sum(tl.where(bins == d, g, 0), axis=0)
    h_d = tl.sum(tl.where(bins == d, h, 0), axis=0)
    return d, k_rem - (g_d - h_d), h_d


@triton.jit
def _settle(hist_ptr, state_ptr, above_ptr, level, row, n_rows, n_splits, k, NS_P2: tl.constexpr,
            DIGIT: tl.constexpr):  # fmt: skip
    """Radix level ``level - 1`` settled (``level >= 1``), from the state before it and its histograms:
    ``(the k-th key's leading `level` digits, entries still to place below them, entries in the k-th key's
    bin of that level, per split [NS_P2]: entries above the leading digits, entries in that bin)``."""
    sps = tl.arange(0, NS_P2)
    bins = tl.arange(0, 1 << DIGIT)
    prefix = (k * 0).to(tl.uint32)
    k_rem = k
    above = tl.zeros([NS_P2], tl.int32)
    if level > 1:
        prefix = tl.load(state_ptr + ((level - 1) * n_rows + row) * 2).to(tl.uint32)
        k_rem = tl.load(state_ptr + ((level - 1) * n_rows + row) * 2 + 1).to(tl.int32)
        above = tl.load(above_ptr + ((level - 1) * n_rows + row) * n_splits + sps, mask=sps < n_splits, other=0)
    tile = _level_tile(hist_ptr, level - 1, row, n_rows, n_splits, NS_P2, DIGIT)
    d, k_rem, n_eq = _descend(tile, k_rem, DIGIT)
    above += tl.sum(tl.where(bins[None, :] > d, tile, 0), axis=1)
    eq = tl.sum(tl.where(bins[None, :] == d, tile, 0), axis=1)
    return (prefix << DIGIT) | d.to(tl.uint32), k_rem, n_eq, above, eq


@triton.jit
def _count(hist, w0, w1, w2, w3, digit, live, DIGIT: tl.constexpr):
    """Adds a block's ``digit`` values (where ``live``) to the counts: ``tl.histogram`` for 8-bit digits;
    for 4-bit digits one byte per bin and lane in four words (a lane sees fewer than 256 entries of a
    split), summed once by :func:`_counts` -- a few instructions per entry."""
    if DIGIT == 8:
        hist += tl.histogram(digit, 1 << DIGIT, mask=live)
    else:
        field = tl.where(live, 1 << ((digit & 3) * 8), 0)
        word = digit >> 2
        w0 += tl.where(word == 0, field, 0)
        w1 += tl.where(word == 1, field, 0)
        w2 += tl.where(word == 2, field, 0)
        w3 += tl.where(word == 3, field, 0)
    return hist, w0, w1, w2, w3


@triton.jit
def _counts(hist, w0, w1, w2, w3, DIGIT: tl.constexpr):
    """The counts ``[2**DIGIT]`` from :func:`_count`'s state."""
    if DIGIT != 8:
        bins = tl.arange(0, 1 << DIGIT)
        for f in tl.static_range(4):
            hist = tl.where(bins == f, tl.sum((w0 >> (8 * f)) & 255, axis=0), hist)
            hist = tl.where(bins == f + 4, tl.sum((w1 >> (8 * f)) & 255, axis=0), hist)
            hist = tl.where(bins == f + 8, tl.sum((w2 >> (8 * f)) & 255, axis=0), hist)
            hist = tl.where(bins == f + 12, tl.sum((w3 >> (8 * f)) & 255, axis=0), hist)
    return hist


@triton.jit
def _split_histogram(base, start, V, prefix, level, hist_out, SPLIT: tl.constexpr, BLOCK: tl.constexpr,
                     SHIFT: tl.constexpr, BITS: tl.constexpr, DIGIT: tl.constexpr):  # fmt: skip
    """Histogram of digit ``level`` of the keys in the split whose leading ``level`` digits are ``prefix``."""
    RADIX: tl.constexpr = 1 << DIGIT
    hist = tl.zeros([RADIX], tl.int32)
    w0 = tl.zeros([BLOCK], tl.int32)
    w1, w2, w3 = w0, w0, w0
    low = BITS - DIGIT * level - DIGIT
    for i in range(0, SPLIT, BLOCK):
        offs = start + i + tl.arange(0, BLOCK)
        inb = offs < V
        u = _ukey(tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32), SHIFT)
        live = inb & ((u >> (low + DIGIT)) == prefix)
        hist, w0, w1, w2, w3 = _count(hist, w0, w1, w2, w3, ((u >> low) & (RADIX - 1)).to(tl.int32), live, DIGIT)
    tl.store(hist_out + tl.arange(0, RADIX), _counts(hist, w0, w1, w2, w3, DIGIT))


@triton.jit
def _stats_kernel(logits_ptr, stride_b, stride_j, draft_ptr, stride_draft, temp_ptr, topk_ptr, gkey_ptr, gidx_ptr,
                  m_ptr, s_ptr, hist_ptr, V, K, K1, n_splits, SPLIT: tl.constexpr, BLOCK: tl.constexpr,
                  SHIFT: tl.constexpr, BITS: tl.constexpr, DIGIT: tl.constexpr):  # fmt: skip
    """Launch 1, per (row, split): argmax; the top digit's histogram (candidate rows) or the split's
    softmax partials ``m = max z``, ``sum exp(z - m)`` without the draft token (other rows)."""
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    b = row // K1
    j = row % K1
    base = logits_ptr + b * stride_b + j * stride_j
    start = sp * SPLIT  # int32 offsets in the row: cheaper per entry
    out = row * n_splits + sp
    if _is_candidate_row(temp_ptr, topk_ptr, b):
        RADIX: tl.constexpr = 1 << DIGIT
        g_best = tl.full([BLOCK], -2147483648, tl.int32)
        g_idx = tl.zeros([BLOCK], tl.int32)
        hist = tl.zeros([RADIX], tl.int32)
        w0 = tl.zeros([BLOCK], tl.int32)
        w1, w2, w3 = w0, w0, w0
        for i in range(0, SPLIT, BLOCK):
            offs = start + i + tl.arange(0, BLOCK)
            inb = offs < V
            x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
            g_best, g_idx, _ = track_argmax(g_best, g_idx, x, inb, offs)
            digit = (_ukey(x, SHIFT) >> (BITS - DIGIT)).to(tl.int32)
            hist, w0, w1, w2, w3 = _count(hist, w0, w1, w2, w3, digit, inb, DIGIT)
        tl.store(hist_ptr + out * RADIX + tl.arange(0, RADIX), _counts(hist, w0, w1, w2, w3, DIGIT))
        gk, gi = lanes_argmax(g_best, g_idx)
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
def _level_kernel(logits_ptr, stride_b, stride_j, temp_ptr, topk_ptr, hist_ptr, state_ptr, above_ptr, level, V, K1,
                  n_splits, n_rows, SPLIT: tl.constexpr, BLOCK: tl.constexpr, NS_P2: tl.constexpr,
                  SHIFT: tl.constexpr, BITS: tl.constexpr, DIGIT: tl.constexpr):  # fmt: skip
    """Radix level ``level >= 1``, per (row, split) of a candidate row; split 0 stores the row's state
    after the previous level (leading digits, entries still to place, entries above per split)."""
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    b = row // K1
    if _is_candidate_row(temp_ptr, topk_ptr, b):
        k = tl.minimum(tl.load(topk_ptr + b), V).to(tl.int32)
        prefix, k_rem, _, above, _ = _settle(hist_ptr, state_ptr, above_ptr, level, row, n_rows, n_splits, k, NS_P2,
                                             DIGIT)  # fmt: skip
        if sp == 0:
            tl.store(state_ptr + (level * n_rows + row) * 2, prefix.to(tl.int64))
            tl.store(state_ptr + (level * n_rows + row) * 2 + 1, k_rem.to(tl.int64))
            sps = tl.arange(0, NS_P2)
            tl.store(above_ptr + (level * n_rows + row) * n_splits + sps, above, mask=sps < n_splits)
        base = logits_ptr + b * stride_b + (row % K1) * stride_j
        out = hist_ptr + ((level * n_rows + row) * n_splits + sp) * (1 << DIGIT)
        _split_histogram(base, sp * SPLIT, V, prefix, level, out, SPLIT, BLOCK, SHIFT, BITS, DIGIT)


@triton.jit
def _compact_kernel(logits_ptr, stride_b, stride_j, temp_ptr, topk_ptr, hist_ptr, state_ptr, above_ptr, cand_ptr,
                    info_ptr, ties_ptr, V, K1, n_splits, n_rows, SPLIT: tl.constexpr, BLOCK: tl.constexpr,
                    NS_P2: tl.constexpr, SHIFT: tl.constexpr, BITS: tl.constexpr, DIGIT: tl.constexpr):  # fmt: skip
    """Per (row, split) of a candidate row: the split's candidates into the row's dense list. Split 0
    writes the row's ``info``: ``(listed, cut as a row key, unlisted ties)``; each split its own tie
    count when the ties are unlisted (else 0)."""
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    b = row // K1
    if _is_candidate_row(temp_ptr, topk_ptr, b):
        k = tl.minimum(tl.load(topk_ptr + b), V).to(tl.int32)
        cut, k_rem, n_eq, above, eq = _settle(hist_ptr, state_ptr, above_ptr, BITS // DIGIT, row, n_rows, n_splits,
                                              k, NS_P2, DIGIT)  # fmt: skip
        sps = tl.arange(0, NS_P2)
        n_above = k - k_rem
        listed_ties = n_above + n_eq <= CAP
        listed = tl.where(listed_ties, above + eq, above)
        offset = tl.sum(tl.where(sps < sp, listed, 0), axis=0)
        thresh = tl.where(listed_ties, cut, cut + 1)  # cut < the largest key: NaNs are canonicalised
        tl.store(ties_ptr + row * n_splits + sp, tl.sum(tl.where((sps == sp) & ~listed_ties, eq, 0), axis=0))
        if sp == 0:
            tl.store(info_ptr + row * 3, tl.sum(listed, axis=0))
            tl.store(info_ptr + row * 3 + 1, cut.to(tl.int64) - (1 << (BITS - 1)))
            tl.store(info_ptr + row * 3 + 2, tl.where(listed_ties, 0, n_eq))
        base = logits_ptr + b * stride_b + (row % K1) * stride_j
        start = sp * SPLIT  # int32 offsets in the row: cheaper per entry
        for i in range(0, SPLIT, BLOCK):
            offs = start + i + tl.arange(0, BLOCK)
            inb = offs < V
            u = _ukey(tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32), SHIFT)
            sel = inb & (u >= thresh)
            if tl.max(sel.to(tl.int32), axis=0) > 0:
                pos = offset + tl.cumsum(sel.to(tl.int32), axis=0) - 1
                tl.store(cand_ptr + row * CAP + pos, offs.to(tl.int32), mask=sel & (pos < CAP))
                offset += tl.sum(sel.to(tl.int32), axis=0)


@triton.jit
def _key_value(key, SHIFT: tl.constexpr):
    """The float32 value of a row key (the inverse of :func:`row_key`; -0.0 comes back as +0.0)."""
    b = (key << SHIFT).to(tl.int32)
    return (b ^ ((b >> 31) & 0x7FFFFFFF)).to(tl.float32, bitcast=True)


@triton.jit
def _kept_mass_kernel(logits_ptr, stride_b, stride_j, draft_ptr, stride_draft, temp_ptr, topk_ptr, topp_ptr, minp_ptr,
                      cand_ptr, info_ptr, ties_ptr, m_ptr, s_ptr, cut_ptr, V, K, K1, n_splits, SPLIT: tl.constexpr,
                      NS_P2: tl.constexpr, SHIFT: tl.constexpr):  # fmt: skip
    """One program per row: the top-p cut among the candidates, then the kept mass of every split without
    the draft token (min-p applied), and ``m``, for the last launch. Other rows: the cut lets all through."""
    row = tl.program_id(0).to(tl.int64)
    b = row // K1
    j = row % K1
    if _is_candidate_row(temp_ptr, topk_ptr, b):
        n_listed = tl.load(info_ptr + row * 3)
        cut = tl.load(info_ptr + row * 3 + 1)
        n_ties = tl.load(info_ptr + row * 3 + 2)  # unlisted entries equal to the k-th key
        t = tl.load(temp_ptr + b).to(tl.float32)
        inv_t = 1.0 / t
        top_p = tl.load(topp_ptr + b).to(tl.float64)
        min_p = tl.load(minp_ptr + b).to(tl.float32)
        logits_row = logits_ptr + b * stride_b + j * stride_j
        cands = cand_ptr + row * CAP
        c = tl.arange(0, CAP)
        listed = c < n_listed
        idx = tl.load(cands + c, mask=listed, other=0).to(tl.int64)
        x = tl.load(logits_row + idx, mask=listed, other=float("-inf")).to(tl.float32)
        key = tl.where(listed, row_key(x, SHIFT), -(1 << 40))
        top = tl.where(n_listed > 0, tl.max(key, axis=0), cut)  # the row's largest key
        m = _key_value(top, SHIFT) * inv_t  # max z, as the reference computes it (z rises with the key)
        w = tl.where(listed, tl.exp(x * inv_t - m), 0.0)
        w_tie = tl.exp(_key_value(cut, SHIFT) * inv_t - m)
        cut_p = cut
        if top_p < 1.0:
            # M(c), the mass of candidates with a key > c, falls as c rises; a candidate is kept when
            # M(its key) < goal. Find the least such c in (cut - 1, top] with 16 probes a round.
            w64 = w.to(tl.float64)
            goal = top_p * (tl.sum(w64, axis=0) + n_ties.to(tl.float64) * w_tie.to(tl.float64))
            lo = cut - 1  # M(lo) is the whole top-k mass: >= goal
            hi = top  # M(top) = 0 < goal
            probes = tl.arange(0, P_PROBES).to(tl.int64) + 1
            while hi - lo > 1:
                at = tl.minimum(lo + (hi - lo + P_PROBES - 1) // P_PROBES * probes, hi)
                below = tl.sum(tl.where(key[None, :] > at[:, None], w64[None, :], 0.0), axis=1) < goal
                hi = tl.min(tl.where(below, at, hi), axis=0)
                lo = tl.max(tl.where(below, lo, at), axis=0)
            cut_p = tl.min(tl.where(key >= hi, key, 1 << 40), axis=0)  # the least kept key
            cut_p = tl.where((n_ties > 0) & (hi <= cut), cut, cut_p)
        excl = tl.load(draft_ptr + b * stride_draft + j, mask=j < K, other=-1).to(tl.int64)
        excl = tl.where(j < K, excl, -1)
        kept = (key >= cut_p) & (w >= min_p) & (idx != excl)
        sps = tl.arange(0, NS_P2)
        in_split = (idx // SPLIT)[:, None] == sps[None, :]
        mass = tl.sum(tl.where(kept[:, None] & in_split, w[:, None], 0.0), axis=0)
        tie_n = tl.load(ties_ptr + row * n_splits + sps, mask=sps < n_splits, other=0)
        excl_ok = (excl >= 0) & (excl < V)
        x_excl = tl.load(logits_row + tl.where(excl_ok, excl, 0)).to(tl.float32)
        excl_tie = (n_ties > 0) & excl_ok & (row_key(x_excl, SHIFT) == cut)  # the draft is an unlisted tie
        tie_n -= (excl_tie & (sps == excl // SPLIT)).to(tie_n.dtype)
        mass += tl.where((cut >= cut_p) & (w_tie >= min_p), tie_n.to(tl.float32) * w_tie, 0.0)
        tl.store(m_ptr + row * n_splits + sps, tl.zeros([NS_P2], tl.float32) + m, mask=sps < n_splits)
        tl.store(s_ptr + row * n_splits + sps, mass, mask=sps < n_splits)
        tl.store(cut_ptr + row, cut_p)
    else:
        tl.store(cut_ptr + row, -(1 << 40))


def radix_digit(rows: int) -> int:
    """Key bits per radix level: 8 (fewer launches) while few rows leave the GPU waiting on launches, 4
    (a histogram of 16 bins costs about a tenth of one of 256 per entry) once many rows make it busy."""
    return 8 if rows <= RADIX8_MAX_ROWS else 4


def topk_mass(logits, drafts, temperature, top_k, top_p, min_p, layout, m_part, s_part, gkey, gidx):
    """The small-top-k class up to the kept mass (:func:`filtered_mass`'s contract): fills ``m_part``,
    ``s_part``, ``gkey``, ``gidx`` (``[rows, n_splits]``) and returns the cut keys ``[rows]``."""
    B, K1, V = logits.shape
    rows, dev = B * K1, logits.device
    n_splits, split = layout
    shift = key_shift(logits.dtype)
    bits = 32 - shift
    digit = radix_digit(rows)
    levels = bits // digit
    hist = torch.empty((levels, rows, n_splits, 1 << digit), dtype=torch.int32, device=dev)
    state = torch.empty((levels, rows, 2), dtype=torch.int64, device=dev)  # level 0's is never read
    above = torch.empty((levels, rows, n_splits), dtype=torch.int32, device=dev)
    cand = torch.empty((rows, TOP_K_MAX), dtype=torch.int32, device=dev)
    info = torch.empty((rows, 3), dtype=torch.int64, device=dev)
    ties = torch.empty((rows, n_splits), dtype=torch.int64, device=dev)
    cut = torch.empty(rows, dtype=torch.int64, device=dev)
    grid, ns_p2 = (rows, n_splits), next_pow2(n_splits)
    head = (logits, logits.stride(0), logits.stride(1))
    draft = (drafts, drafts.stride(0))
    sizes = dict(SPLIT=split, BLOCK=PASS_BLOCK, SHIFT=shift, BITS=bits, DIGIT=digit, num_warps=PASS_WARPS)
    _stats_kernel[grid](*head, *draft, temperature, top_k, gkey, gidx, m_part, s_part, hist, V, K1 - 1, K1,
                        n_splits, **sizes)  # fmt: skip
    for level in range(1, levels):
        _level_kernel[grid](*head, temperature, top_k, hist, state, above, level, V, K1, n_splits, rows, NS_P2=ns_p2,
                            **sizes)  # fmt: skip
    _compact_kernel[grid](*head, temperature, top_k, hist, state, above, cand, info, ties, V, K1, n_splits, rows,
                          NS_P2=ns_p2, **sizes)  # fmt: skip
    _kept_mass_kernel[(rows,)](*head, *draft, temperature, top_k, top_p, min_p, cand, info, ties, m_part, s_part,
                               cut, V, K1 - 1, K1, n_splits, SPLIT=split, NS_P2=ns_p2, SHIFT=shift,
                               num_warps=8)  # fmt: skip
    return cut
