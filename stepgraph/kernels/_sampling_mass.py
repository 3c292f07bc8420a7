"""The per-split mass passes of chain verify sampling (launch 1 of the temperature class; the last pass
of the filtered class), and the filtered class's launches up to that pass.

Each program of a (row, vocabulary split) writes the split's ``m`` (max of ``z = x / T``) and the mass
``sum exp(z - m)`` of its kept entries without the row's draft token; the last launch combines them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import _sampling_topk
from ._argmax import sortable_key
from ._common import EXACT_ROUNDING, after_previous, dependent_launch, jit_any_batch, next_pow2
from ._sampling_filter import (
    BLOCK,
    DONE,
    MASS_BLOCK,
    NBINS,
    STATE,
    TOPK,
    _stats_kernel,
    add_counts,
    bucket_log2,
    bucket_totals,
    key_shift,
    late_pivot_request,
    load_ahead,
    load_state,
    narrowed_state,
    no_counts,
    num_rounds,
    pivot_request,
    regular_key,
    row_key,
    small_top_k_request,
    split_softmax,
    store_state,
)
from ._sampling_pivot import (
    SUB,
    WARPS,
    late_list,
    list_late_split,
    pivot_launches,
    pivot_options,
    pivot_step,
    start_late,
)
from ._sampling_pivot import _stats_kernel as _pivot_stats_kernel
from ._sampling_topk import list_buffers, list_split, maxima_per_split, row_bound, row_cuts

NUM_WARPS = 4


@jit_any_batch
def _temperature_kernel(
    logits_ptr,
    stride_b,
    stride_j,
    draft_ptr,
    stride_draft,
    temp_ptr,
    gkey_ptr,
    gidx_ptr,
    m_ptr,
    s_ptr,
    V,
    K,
    K1,
    n_splits,
    SPLIT,
    BLOCK: tl.constexpr,
    GDC: tl.constexpr,
):
    """Temperature class, per (row, split): argmax, ``m_split = max z`` and ``sum exp(z - m_split)`` over
    the split without the row's draft token."""
    if GDC:  # a dependent launch: the kernel before it has ended first
        after_previous()
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    b = row // K1
    j = row % K1
    t = tl.load(temp_ptr + b).to(tl.float32)
    inv_t = 1.0 / tl.where(t > 0, t, 1.0)
    excl = tl.load(draft_ptr + b * stride_draft + j, mask=j < K, other=-1).to(tl.int64)
    excl = tl.where(j < K, excl, -1)
    base = logits_ptr + b * stride_b + j * stride_j
    gk, gi, m, s = split_softmax(base, sp.to(tl.int64) * SPLIT, V, excl, inv_t, SPLIT, BLOCK)
    out = row * n_splits + sp
    tl.store(gkey_ptr + out, gk)
    tl.store(gidx_ptr + out, gi)
    tl.store(m_ptr + out, m)
    tl.store(s_ptr + out, s)


@jit_any_batch
def _round_kernel(
    logits_ptr,
    stride_b,
    stride_j,
    temp_ptr,
    topk_ptr,
    topp_ptr,
    gkey_ptr,
    zmax_ptr,
    state_ptr,
    part_ptr,
    done_ptr,
    minp_ptr,
    seed_ptr,
    offset_ptr,
    pivot_lo_ptr,
    pivot_y_ptr,
    pivot_total_ptr,
    pivot_part_ptr,
    pivot_count_ptr,
    pivot_pool_ptr,
    maxima_ptr,
    bound_ptr,
    list_ptr,
    list_count_ptr,
    ninf_ptr,
    r,
    V,
    K1,
    n_splits,
    n_rows,
    SPLIT,
    BLOCK: tl.constexpr,
    NS_P2: tl.constexpr,
    SHIFT: tl.constexpr,
    PIVOT: tl.constexpr,
    PIVOT_NB_P2: tl.constexpr,
    PIVOT_STEPS: tl.constexpr,
    PIVOT_SEPARATE: tl.constexpr,
    PIVOT_ROUNDS: tl.constexpr,
    PIVOT_POOL: tl.constexpr,
    LIST_M: tl.constexpr,
    LIST_GCAP: tl.constexpr,
    LAUNCHES: tl.constexpr,
    LATE: tl.constexpr,
    LATE_START: tl.constexpr,
    LATE_LAUNCH: tl.constexpr,
    GDC: tl.constexpr,
):
    """Round ``r``: update the row's state, then sum this split into the 16 buckets of ``[lo, hi)``. With
    ``PIVOT``, step ``r`` of the pivot requests' draws too (:func:`._sampling_pivot.pivot_step`; late ones
    draw from the cut their top-k phase found), and the small top-k requests' bound (round 0) and lists
    (round 1, :func:`._sampling_topk.list_split`): their rows have no round work. No row searches a top-p
    cut there. The late rows start in round ``LATE_START`` (:func:`._sampling_pivot.start_late`). With a pool
    (``PIVOT_POOL``), ``LATE_LAUNCH`` says which launch this is for them, so that the pool's code is in the
    variants of those launches alone (a launch of a variant with it takes longer, even where none of it
    runs): 2, their last count, where they list their entries at or above it
    (:func:`._sampling_pivot.list_late_split`); 1, their start; 0, another. Without, -1 leaves the start to
    ``r`` (one variant for every launch). ``LATE`` false promises no late request (``LATE_LAUNCH`` 0): the
    launches are then the draws' alone."""
    if GDC:  # a dependent launch: the kernel before it has ended first
        after_previous()
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    if PIVOT:
        pivot_step(logits_ptr, stride_b, stride_j, temp_ptr, topk_ptr, topp_ptr, minp_ptr, seed_ptr, offset_ptr,
                   pivot_lo_ptr, pivot_y_ptr, pivot_total_ptr, pivot_part_ptr, pivot_count_ptr,
                   pivot_pool_ptr, r, row, sp, V, K1, n_splits, SPLIT, BLOCK, NS_P2, PIVOT_NB_P2, SHIFT, PIVOT_STEPS,
                   PIVOT_SEPARATE, PIVOT_ROUNDS, PIVOT_POOL, LAUNCHES, LATE, LATE_START)  # fmt: skip
        if r < 2:  # noqa: SIM102 (the request's settings loaded in rounds 0 and 1 alone)
            if small_top_k_request(tl.load(temp_ptr + row // K1), tl.load(topk_ptr + row // K1).to(tl.int64)):
                if r == 0:  # the bound, from the subset maxima of every split
                    if sp == 0:
                        row_bound(topk_ptr, maxima_ptr, bound_ptr, row, V, K1, n_splits, LIST_M, LIST_M * NS_P2, SHIFT)
                else:  # the entries above it
                    list_split(logits_ptr, stride_b, stride_j, bound_ptr, list_ptr, list_count_ptr, ninf_ptr, row, sp,
                               V, K1, n_splits, SPLIT, BLOCK, SHIFT, LIST_GCAP)  # fmt: skip
    lo, hi, g_hi, target, phase, m, k_max, top_p = load_state(state_ptr + (r * n_rows + row) * STATE)
    if PIVOT:  # noqa: SIM102 (a constexpr)
        if LATE_LAUNCH < 0:  # noqa: SIM108 (a constexpr) which launch it is, known at run time alone
            starts = r == LATE_START
        else:  # each launch's variant knows
            starts = LATE_LAUNCH == 1
        if starts:  # the late rows' top-k cut is found: their draws start
            before = tl.load(state_ptr + ((r - 1) * n_rows + row) * STATE + 4).to(tl.int32) == TOPK  # it listed
            start_late(logits_ptr, stride_b, stride_j, temp_ptr, topk_ptr, topp_ptr, minp_ptr, seed_ptr, offset_ptr,
                       gkey_ptr, zmax_ptr, pivot_lo_ptr, pivot_y_ptr, pivot_total_ptr, pivot_part_ptr, pivot_count_ptr,
                       pivot_pool_ptr, row, sp, lo, before, V, K1, n_splits, SPLIT, BLOCK, NS_P2, PIVOT_NB_P2, SHIFT,
                       PIVOT_STEPS, PIVOT_ROUNDS, PIVOT_POOL, LAUNCHES, LATE_START)  # fmt: skip
    listing = row < 0  # a tensor: the branches below assign one
    if PIVOT:  # noqa: SIM102 (a constexpr)
        if LATE_LAUNCH == 2:  # a late row's last count lists its entries from there
            b = row // K1
            t, k, p = tl.load(temp_ptr + b), tl.load(topk_ptr + b).to(tl.int64), tl.load(topp_ptr + b)
            listing = late_pivot_request(t, k, p) & (phase == TOPK)
            if listing:
                base = logits_ptr + b * stride_b + (row % K1) * stride_j
                pool = pivot_pool_ptr + (row * n_splits + sp) * (WARPS + WARPS * PIVOT_POOL)
                counts = list_late_split(base, sp.to(tl.int64) * SPLIT, V, lo, hi, SPLIT, SHIFT, pool, PIVOT_POOL)
                bins = tl.arange(0, NBINS)
                tl.store(part_ptr + ((r * n_rows + row) * n_splits + sp) * NBINS + bins, counts.to(tl.float64))
    # A pivot class without late requests (the top_p class) searches no cut: its rows' states are final before
    # round 0 (the kept mass reads them there), and its variants leave the search's code out.
    searching = (phase != DONE) & (LATE or not PIVOT)
    if searching & ~listing:
        b = row // K1
        t = tl.load(temp_ptr + b).to(tl.float32)
        inv_t = 1.0 / tl.where(t > 0, t, 1.0)
        base = logits_ptr + b * stride_b + (row % K1) * stride_j
        shift = bucket_log2(lo, hi).to(tl.uint32)
        lo32 = lo.to(tl.int32)
        hi32 = hi.to(tl.int32)  # hi <= sortable_key(+inf) + 1 for a regular row
        width = (hi - lo).to(tl.uint32)  # a key k is in [lo, hi) when k - lo, unsigned, is below it
        bins = tl.arange(0, NBINS)
        c0, c1, c2, c3 = no_counts(BLOCK)
        mass = tl.zeros([NBINS, MASS_BLOCK], tl.float64)  # per bucket and lane; reduced once
        start = sp.to(tl.int64) * SPLIT
        ahead = load_ahead(base, start + tl.arange(0, BLOCK), V, start + SPLIT)
        for i in range(0, SPLIT, BLOCK):
            offs = start + i + tl.arange(0, BLOCK)
            inb = offs < V
            x = ahead
            ahead = load_ahead(base, offs + BLOCK, V, start + SPLIT)
            above = (regular_key(x, SHIFT) - lo32).to(tl.uint32, bitcast=True)
            live = inb & (above < width)
            if phase == TOPK:
                c0, c1, c2, c3 = add_counts(c0, c1, c2, c3, (above >> shift).to(tl.int32), live)
            elif not PIVOT:  # noqa: SIM102 (a constexpr: the top-p class draws its top-p rows)
                if tl.max(live.to(tl.int32), axis=0) > 0:  # top-p: few live entries once top-k has cut
                    for q in range(0, BLOCK, MASS_BLOCK):
                        o = start + i + q + tl.arange(0, MASS_BLOCK)[None, :]  # [1, MB]: broadcasts to the bins
                        xs = tl.load(base + o, mask=o < V, other=float("-inf")).to(tl.float32)
                        ks = sortable_key(xs) >> SHIFT
                        ls = (o < V) & (ks >= lo32) & (ks < hi32)
                        bs = tl.where(ls, ((ks - lo32).to(tl.uint32, bitcast=True) >> shift).to(tl.int32), -1)
                        w = tl.where(ls, tl.exp(xs * inv_t - m), 0.0).to(tl.float64)
                        mass += tl.where(bins[:, None] == bs, w, 0.0)
        total = tl.where(phase == TOPK, bucket_totals(c0, c1, c2, c3).to(tl.float64), tl.sum(mass, axis=1))
        tl.store(part_ptr + ((r * n_rows + row) * n_splits + sp) * NBINS + bins, total)
    after = state_ptr + ((r + 1) * n_rows + row) * STATE
    if searching:  # the row's last program to store its sums narrows its interval, once for the row
        tl.debug_barrier()  # every thread's stores are issued before the count says so
        if tl.atomic_add(done_ptr + row, 1, sem="acq_rel", scope="gpu") == n_splits - 1:
            tl.store(done_ptr + row, 0)
            part = part_ptr + (r * n_rows + row) * n_splits * NBINS
            lo, hi, g_hi, target, phase = narrowed_state(lo, hi, g_hi, target, phase, k_max, top_p, part, n_splits,
                                                         NS_P2)  # fmt: skip
            store_state(after, lo, hi, g_hi, target, phase, m, k_max, top_p)
    elif (sp == 0) & (LATE or not PIVOT):
        store_state(after, lo, hi, g_hi, target, phase, m, k_max, top_p)


@jit_any_batch
def _kept_mass_kernel(
    logits_ptr,
    stride_b,
    stride_j,
    draft_ptr,
    stride_draft,
    temp_ptr,
    topk_ptr,
    minp_ptr,
    state_ptr,
    m_ptr,
    s_ptr,
    cut_ptr,
    final,
    V,
    K,
    K1,
    n_splits,
    n_rows,
    SPLIT,
    BLOCK: tl.constexpr,
    SHIFT: tl.constexpr,
    PIVOT: tl.constexpr,
    GDC: tl.constexpr,
):
    """Filtered class, per (row, split): the final cut-off (the state before round ``final``: after the last one,
    or before the first in a class that searches no cut), then the kept mass ``sum exp(z - m)`` over the split
    without the row's draft token. Split 0 stores the cut. With ``PIVOT``, the rows of small top-k requests
    (whose cut and masses the launch before stored) are left alone, and those of pivot requests store no kept
    mass."""
    if GDC:  # a dependent launch: the kernel before it has ended first
        after_previous()
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    lo, hi, g_hi, target, phase, m, k_max, top_p = load_state(state_ptr + (final * n_rows + row) * STATE)
    b = row // K1
    j = row % K1
    t = tl.load(temp_ptr + b).to(tl.float32)
    inv_t = 1.0 / tl.where(t > 0, t, 1.0)
    min_p = tl.load(minp_ptr + b).to(tl.float32)
    excl = tl.load(draft_ptr + b * stride_draft + j, mask=j < K, other=-1).to(tl.int64)
    excl = tl.where(j < K, excl, -1)
    base = logits_ptr + b * stride_b + j * stride_j
    s_lane = tl.zeros([BLOCK], tl.float32)
    start = sp.to(tl.int64) * SPLIT
    k = tl.load(topk_ptr + b).to(tl.int64)
    skip = PIVOT and pivot_request(t, k, top_p)  # pivot rows draw without it
    if not (PIVOT and small_top_k_request(t, k)):
        if sp == 0:
            tl.store(cut_ptr + row, lo)
        if not skip:
            for i in range(0, SPLIT, BLOCK):
                offs = start + i + tl.arange(0, BLOCK)
                inb = offs < V
                x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
                w = tl.exp(x * inv_t - m)
                kept = inb & (row_key(x, SHIFT) >= lo) & (w >= min_p) & (offs != excl)
                s_lane += tl.where(kept, w, 0.0)
        tl.store(m_ptr + row * n_splits + sp, m)
        tl.store(s_ptr + row * n_splits + sp, tl.sum(s_lane, axis=0))


def filtered_mass(logits, drafts, temperature, top_k, top_p, min_p, layout, m_part, s_part, gkey, gidx, *, pivot=None,
                  pick=None, late=True, dependent=True):  # fmt: skip
    """The filtered class up to the kept mass: stats, cut-off rounds, kept mass. Fills ``m_part``,
    ``s_part``, ``gkey``, ``gidx`` (``[rows, n_splits]``) and returns the cut keys ``[rows]``. ``pivot``:
    ``None`` (every row gets its cut), or ``(seed, offset, lo, y, total, part, count, peak, pool)`` (``seed``,
    ``offset`` ``[B]`` and :func:`._sampling_pivot.pivot_buffers`): the rows of pivot requests skip the rounds
    and the kept mass and draw in the stats launch and the rounds instead, into ``y``; those of small top-k
    requests find their cut as the small top-k class does in launches of its own: their subset maxima in the
    stats launch, the bound in round 0, the lists in round 1, then the cut and kept mass in a launch of their
    own after the rounds (:func:`._sampling_topk.row_cuts`), and with ``pick`` (``[rows]`` int64), their
    samples from their lists. With ``pivot``, ``late=False`` promises no late request (``pivot`` from
    :func:`._sampling_pivot.pivot_buffers` with the same ``late``): the rounds are the draws' launches alone
    (:func:`._sampling_pivot.pivot_launches`). ``dependent``: every launch a programmatic dependent of the
    kernel before it (:func:`._common.dependent_launch`)."""
    B, K1, V = logits.shape
    rows, dev = B * K1, logits.device
    n_splits, split = layout
    shift = key_shift(logits.dtype)
    rounds = num_rounds(32 - shift) if pivot is None else pivot_launches(32 - shift, late)
    options = pivot_options(pivot is not None, n_splits, late, 32 - shift)
    assert rounds >= options["PIVOT_STEPS"], "the pivot draws take a step in each of the first launches of the rounds"
    kmin = torch.empty((rows, n_splits), dtype=torch.int32, device=dev)
    kmax = torch.empty_like(kmin)
    state = torch.empty((rounds + 1, rows, STATE.value), dtype=torch.float64, device=dev)  # before each round
    part = torch.empty((rounds, rows, n_splits, 16), dtype=torch.float64, device=dev)
    cut = torch.empty(rows, dtype=torch.int64, device=dev)
    grid = (rows, n_splits)
    head = (logits, logits.stride(0), logits.stride(1))
    pdl = dependent_launch(logits, dependent)
    ns_p2 = next_pow2(n_splits)
    nb_p2 = next_pow2(triton.cdiv(split, SUB.value)) if pivot is not None else 1  # pivot sub-blocks a split
    stats = (gkey, gidx, m_part, kmin, kmax)
    if pivot is None:
        done = torch.zeros(rows, dtype=torch.int32, device=dev)  # counts a launch's programs of a row that are done
        _stats_kernel[grid](*head, temperature, top_k, top_p, *stats, state, done, V, K1, n_splits, SPLIT=split,
                            BLOCK=BLOCK, NS_P2=ns_p2, SHIFT=shift, num_warps=NUM_WARPS, **EXACT_ROUNDING,
                            **pdl)  # fmt: skip
        draws = (min_p, *(cut,) * 8)  # unused
        maxima, *listed = (cut,) * 6  # unused
    else:
        seed, offset, lo, y, total, masses, count, peak, pool = pivot
        requests = (temperature, top_k, top_p, min_p, seed, offset)
        maxima, *listed = list_buffers(rows, n_splits, dev)  # bound, lists, counts, -inf counts, scratch
        first = torch.empty((rows, n_splits, 16), dtype=torch.int32, device=dev)  # late rows' first counts
        _pivot_stats_kernel[grid](*head, *requests, *stats, lo, y, total, masses, peak, count, maxima, first, state, V,
                                  K1, n_splits, SPLIT=split, BLOCK=BLOCK, NS_P2=ns_p2, NB_P2=nb_p2, SHIFT=shift,
                                  M=maxima_per_split(n_splits), LATE=late, num_warps=NUM_WARPS, **pdl,
                                  **EXACT_ROUNDING)  # fmt: skip
        draws = (min_p, seed, offset, lo, y, total, masses, count, pool)
        done = count[1]  # the draws count with count[0]
    search = (temperature, top_k, top_p, gkey, m_part, state, part, done)
    for r in range(rounds):
        if options["PIVOT_POOL"]:  # the late rows' last count and start are variants of their own
            late_launch = {late_list(32 - shift): 2, options["LATE_START"]: 1}.get(r, 0)
        else:  # no late rows, or their start known from r alone
            late_launch = 0 if pivot is not None and not late else -1
        _round_kernel[grid](*head, *search, *draws, maxima, *listed[:4], r, V, K1, n_splits, rows, SPLIT=split,
                            BLOCK=BLOCK, NS_P2=ns_p2, SHIFT=shift, PIVOT=pivot is not None, PIVOT_NB_P2=nb_p2,
                            **options, LIST_M=maxima_per_split(n_splits), LIST_GCAP=_sampling_topk.GATHER_CAP,
                            LAUNCHES=rounds, LATE=late, LATE_LAUNCH=late_launch, **pdl,
                            num_warps=NUM_WARPS, **EXACT_ROUNDING)  # fmt: skip
    if pivot is not None:  # before the kept mass, which sets the other rows' cut
        sample = (seed, offset, pick) if pick is not None else None
        row_cuts(logits, drafts, temperature, top_k, top_p, min_p, layout, m_part, s_part, listed, cut, sample,
                 dependent)  # fmt: skip
    final = rounds if pivot is None or late else 0  # the state before round 0 is final where none searches
    _kept_mass_kernel[grid](
        *head, drafts, drafts.stride(0), temperature, top_k, min_p, state, m_part, s_part, cut, final, V, K1 - 1, K1,
        n_splits, rows, SPLIT=split, BLOCK=BLOCK, SHIFT=shift, PIVOT=pivot is not None, num_warps=NUM_WARPS,
        **EXACT_ROUNDING, **pdl,
    )  # fmt: skip
    return cut
