"""A draw from the top-p (or large top-k, with or without top-p) distribution of every pivot row
(:func:`.chain_sampling_ref.pivot_draws`), without the cut-off: rejection by a rising pivot, in attempts of
:data:`SAMPLES` candidates.

Top-p and top-k keep an upper set of keys, so candidates drawn from the weights of the keys ``>= lo`` until
one lands in the kept set give a draw from it; an attempt whose candidates all miss proves every key up to
the largest of them outside, and the next attempt starts past it. A candidate is checked by the float64 mass
of strictly larger keys against ``top_p`` times the total, or by their number against ``top_k``; the first
kept one is the row's draw (the first kept candidate in drawing order, as one at a time would find it). An
attempt moves the pivot past the largest of its candidates, about four times as far as one candidate would, so
rows that reject draw after draw (a large top-k alone over flat logits, a small top-p) need two or three
attempts where they took up to eight single draws, each a launch. Min-p keeps an upper set too, and it is
known once ``max z`` is: with it, only the entries of weight ``>= min_p`` are drawn from (the total stays that
of every entry).

The draws launch nothing of their own. A row without min-p makes its first attempt in the filtered class's
stats launch (:func:`_stats_kernel`): each program stores its split's sub-block masses over their own
peaks (no ``max z`` needed), and the row's last program to store them (an atomic count) draws
(:func:`_first_draw`). The checks and later attempts run inside the first :data:`STEPS` launches of the
cut-off rounds (:func:`pivot_step`, over (row, vocabulary split)), whose programs for pivot rows have no
round work. Each program of a row still drawing stores the float64 mass of its split's entries that can be
drawn, of each of its sub-blocks of ``SUB`` entries (the first time beside the total), and the mass and number
of its entries above each candidate. A draw step checks the row's last attempt by them and, if it kept none,
makes the next by inverse CDF, for each candidate: the split from the split masses, the sub-block from its
sub-block masses, the entry from a scan of it (:func:`_draw_step`). A row with min-p makes its first attempt
there, a step after the others.

The first :data:`SEPARATE` launches take turns: masses, then attempts (split 0's programs). In the later ones
few rows still draw, and a launch does both: the row's last program to store its masses draws. Doing both
is slower while most rows draw, as a row's draw waits for its last program under the others' loads. A row
still drawing after the last launch goes on alone there, a pass over the row per attempt, up to
:data:`.chain_sampling_ref.PIVOT_ROUNDS` attempts.

A late request (a top-k above ``SMALL_TOP_K_MAX`` with top-p) weighs top-p over its top-k set alone, so its
rows first find their top-k cut: the stats launch counts their entries in 16 buckets of every key, and the
rounds' top-k phase narrows from there, ending in launch 3 over 16-bit keys, 7 over 32-bit ones
(:func:`late_start`). In the launch where it ends, :func:`start_late` sets ``lo`` to the cut once the search
state holds it, and that launch and the ones after it draw as above from there, each one doing both (masses,
then the draw): the first also weighs the top-k set, the total the checks compare with. With few splits a
row (large batches, :func:`pool_entries`), a pool spares those passes. The launch before the start, whose
count narrows the cut from 16 keys to one, also lists every entry at or above those 16 keys, each warp its
quarter of the split (:func:`list_late_split`): the top-k set and a few more. At the start, a row whose pool
holds all of them makes every draw and check from the list, by one program (:func:`_pool_start`). A row whose
search ended before that launch lists its top-k set in the start's pass instead (:func:`_pool_mass_loop`),
and if its pool holds all of it, its last program makes the draws and checks there (:func:`_pool_draws`).
Either way the launches after it have nothing left to do. A batch without late requests (the ``top_p`` class; the
``general`` class has them) takes :data:`DRAW_LAUNCHES` launches of the rounds, one with them those up to the
end of the late rows' :data:`LATE_STEPS` (:func:`pivot_launches`).

Rows of other requests, and the greedy or degenerate rows of pivot requests, take no part: ``y`` holds
the token, ``-1`` (the row's argmax) or ``-2`` (not a pivot request, or a late one not started).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._argmax import track_argmax
from ._common import after_previous, jit_any_batch, triton_interprets
from ._sampling_filter import (
    INF_KEY_C,
    NBINS,
    NEG_INF_KEY_C,
    add_counts,
    bucket_log2,
    bucket_totals,
    key_floor,
    late_pivot_request,
    load_ahead,
    num_rounds,
    pivot_request,
    regular_key,
    row_key,
    small_top_k_request,
    split_counts,
    split_stats,
    store_initial_state,
    store_stats,
    verify_stream,
)
from ._sampling_topk import split_maxima
from .chain_sampling_ref import PIVOT_ROUNDS, PIVOT_SAMPLES, PIVOT_SUB

NOT_PIVOT: tl.constexpr = tl.constexpr(-2)
ARGMAX: tl.constexpr = tl.constexpr(-1)
UNDRAWN: tl.constexpr = tl.constexpr(-3)  # a row that makes its first draw in the rounds (min-p's)
LOWEST: tl.constexpr = tl.constexpr(-(2**62))  # below every key
#: Entries a sub-block: a warp's share of a ``BLOCK`` (four warps), summed without crossing warps.
SUB: tl.constexpr = tl.constexpr(PIVOT_SUB)
#: Candidates an attempt draws (:data:`.chain_sampling_ref.PIVOT_SAMPLES`).
SAMPLES: tl.constexpr = tl.constexpr(PIVOT_SAMPLES)
#: A row's words in ``lo`` (:func:`pivot_buffers`, :func:`_store_pivot`): the pivot, its last attempt's candidates
#: from :data:`CANDS`, their roles from :data:`ROLES`, the number of lower records at :data:`RECORDS`, then their
#: floors (float32 bits) and their candidates' indices, slot by slot, from :data:`FLOORS` and :data:`INDICES`
#: (:func:`_lower_records`). Stored once an attempt, by the program that makes it: the row's programs only load
#: them (a reduction over the candidates is a round through shared memory).
CANDS: tl.constexpr = tl.constexpr(1)
ROLES: tl.constexpr = tl.constexpr(1 + PIVOT_SAMPLES)
RECORDS: tl.constexpr = tl.constexpr(1 + 2 * PIVOT_SAMPLES)
FLOORS: tl.constexpr = tl.constexpr(2 + 2 * PIVOT_SAMPLES)
INDICES: tl.constexpr = tl.constexpr(2 + 3 * PIVOT_SAMPLES)
LO_WORDS: tl.constexpr = tl.constexpr(2 + 4 * PIVOT_SAMPLES)
#: A candidate's role in its attempt's check (:func:`_lower_records`): it never comes first among the kept ones
#: (an earlier candidate's key is as large), it is a lower record (weighed by its slot), or it is the largest
#: (weighed by what can be drawn above it: the next attempt's masses).
NEVER: tl.constexpr = tl.constexpr(0)
LOWER: tl.constexpr = tl.constexpr(1)
LARGEST: tl.constexpr = tl.constexpr(2)
#: Warps of a program: each sums a sub-block of a tile, or a quarter of the split in a listing pass (its region of
#: the pool).
WARPS: tl.constexpr = tl.constexpr(4)
#: A split's sums before its sub-blocks' masses, each as :data:`WARPS` words (a warp's share, stored where the
#: warp holds it; its readers add them up): the mass of what can be drawn, that of every entry, the number of
#: what can be drawn, then the masses of the entries that can be drawn above each lower record of the row's last
#: attempt, at its candidate's index (:func:`_lower_records`), then their numbers (numbers as float64).
SUMS: tl.constexpr = tl.constexpr(3 + 2 * PIVOT_SAMPLES)
HEAD: tl.constexpr = tl.constexpr(SUMS.value * WARPS.value)
SUMS_P2: tl.constexpr = tl.constexpr(triton.next_power_of_2(SUMS.value))
#: Entries of a late row that one warp of a split's program lists, in the last count of its top-k search
#: (:func:`list_late_split`) or in its start's pass (:func:`_pool_mass_loop`): its region of the pool. A row
#: whose regions all hold their entries draws to the end from them in its start; one with a fuller region
#: checks its draws by passes, as others do.
POOL = 256
#: The pool serves rows of this many splits or fewer (large batches), where a launch's passes are long and the
#: launches after the start are worth sparing; with more, a row's program would draw alone for longer than the
#: passes take (:func:`pool_entries`).
POOL_SPLITS = 8
#: Entries of the pool a step of :func:`_pool_masses` reads: a tile of every region.
POOL_TILE: tl.constexpr = tl.constexpr(1024)
#: Sub-blocks of every split the first draw sums a step: a [splits, FIRST_CHUNK] tile in registers.
FIRST_CHUNK: tl.constexpr = tl.constexpr(16)
#: Launches of the cut-off rounds the draws run in (a bfloat16 row has eight).
STEPS = 8
#: Of them, the first ones that take turns: masses in one, the draw by them in the next (:func:`pivot_step`).
#: Two: once launch 1 has checked the first draws, few rows still draw (module docstring).
SEPARATE = 2
#: The launches of the rounds where no request is late (no top-k search to wait for): two that take turns,
#: then two that do both, the last one where a row still drawing goes on alone (a pass over its row an
#: attempt by one program, far slower than a launch). Each launch costs 1-4 µs even with nothing to do
#: (B = 1 to 64); the rows that reject attempt after attempt (a small top-p, a large top-k alone over flat
#: rows) need three at most, and so rarely a fourth that going alone costs less than the launches would.
DRAW_LAUNCHES = 4
#: A late row's steps, from the launch where its top-k cut is known (:func:`late_start`): its first draw from
#: the top-k set, then checks (and draws where one fails), the last one going on alone. The rounds end there
#: (:func:`pivot_launches`), not at the end of the search's schedule: over 32-bit keys that spares four
#: launches with nothing left to do. Fewer steps cost more than they spare: a top-p of 0.5 goes on alone.
LATE_STEPS = 5
#: Whether the kernels store sub-block sums by PTX (:func:`_store_sums`): not under the interpreter.
PTX_STORES: tl.constexpr = tl.constexpr(not triton_interprets())
#: Registers a thread of the round kernel that makes the draws (its ``maxnreg``). The compiler takes 128, at
#: which four programs share an SM (five at 96), and a launch of masses at B = 8 runs in more waves.
REGISTERS = 96


@triton.jit
def _row_facts(row, K1, n_splits, temp_ptr, topk_ptr, topp_ptr, gkey_ptr, zmax_ptr, NS_P2: tl.constexpr):
    """``(pivot request, row takes part, inv_t, m)``: a row takes part when its request is a pivot request and
    its logits are regular (no NaN or +inf, not all -inf) and ``max x / T`` is finite. The stats are read
    from L2: the stats launch's last program of a row reads those its other programs stored."""
    b = row // K1
    sp = tl.arange(0, NS_P2)
    t = tl.load(temp_ptr + b).to(tl.float32)
    pivot = pivot_request(t, tl.load(topk_ptr + b).to(tl.int64), tl.load(topp_ptr + b))
    stats = row * n_splits + sp
    gk = tl.max(tl.load(gkey_ptr + stats, mask=sp < n_splits, other=-2147483648, cache_modifier=".cg"), axis=0)
    m = tl.max(tl.load(zmax_ptr + stats, mask=sp < n_splits, other=float("-inf"), cache_modifier=".cg"), axis=0)
    finite = (m.to(tl.int32, bitcast=True) & 0x7F800000) != 0x7F800000
    active = pivot & (gk < INF_KEY_C) & (gk != NEG_INF_KEY_C) & finite
    return pivot, active, 1.0 / tl.where(t > 0, t, 1.0), m


@triton.jit
def _split_mass(base, start, V, lo, below, index, n_mass, n_count, min_p, inv_t, m, SPLIT, BLOCK: tl.constexpr,
                SHIFT: tl.constexpr, out, whole, pool, lists, POOL: tl.constexpr, START: tl.constexpr):  # fmt: skip
    """The float64 mass ``w = exp(x / T - m)`` of the entries of ``[start, start + SPLIT) ∩ [0, V)`` that can
    be drawn, those with a key ``>= lo`` and ``w >= min_p``, stored at sum 0 (:data:`HEAD`: ``out[q * WARPS +
    warp]`` holds a warp's share of sum ``q``), their number at sum 2, the mass of each of its sub-blocks of ``SUB``
    entries at ``out[HEAD + i]``, and for the first ``n_mass`` and ``n_count`` slots ``s`` the mass and number of
    the entries with ``w >= min_p`` and ``x >= below[s]`` (the floors past the lower records of the row's last
    attempt, :func:`_lower_records`) at sums ``3 + index[s]`` and ``3 + SAMPLES + index[s]`` (its candidate's);
    with ``whole``, the mass of all its entries at sum 1 (with ``START``, a late row's step 0, which has no
    candidates yet, of those with a key ``>= lo``, and where ``lists`` with a ``POOL`` too, listed in the split's
    ``pool``: :func:`_pool_mass_loop`). Returns the warps' shares (``[WARPS]``) of the split's mass and number and
    of the slots' (``[WARPS, SAMPLES]``): no exchange between warps."""
    if whole:  # separate loops: a branch inside one would keep its loads from being pipelined
        if START & (POOL > 0):
            if lists & (min_p > 0):
                total, every = _pool_mass_loop(base, start, V, lo, min_p, inv_t, m, SPLIT, SHIFT, out, pool, POOL, True)
            elif lists:  # what can be drawn is the whole set: one sum
                total, every = _pool_mass_loop(base, start, V, lo, min_p, inv_t, m, SPLIT, SHIFT, out, pool, POOL,
                                               False)  # fmt: skip
            else:
                total, every, _, _, _ = _mass_loop(base, start, V, lo, below, index, 0, 0, min_p, inv_t, m, SPLIT,
                                                   BLOCK, SHIFT, out, True, START, False)  # fmt: skip
            count = tl.zeros([WARPS], tl.int32)
            slot_mass = tl.zeros([WARPS, SAMPLES], tl.float64)
            slot_count = tl.zeros([WARPS, SAMPLES], tl.int32)
        else:
            if n_mass + n_count > 0:  # a loop of its own: a branch inside one keeps its loads from being pipelined
                total, every, count, slot_mass, slot_count = _mass_loop(base, start, V, lo, below, index, n_mass,
                                                                        n_count, min_p, inv_t, m, SPLIT, BLOCK, SHIFT,
                                                                        out, True, START, True)  # fmt: skip
            else:
                total, every, count, slot_mass, slot_count = _mass_loop(base, start, V, lo, below, index, 0, 0, min_p,
                                                                        inv_t, m, SPLIT, BLOCK, SHIFT, out, True, START,
                                                                        False)  # fmt: skip
        _store_sums(out + WARPS + tl.arange(0, WARPS), every)
    else:
        if n_mass + n_count > 0:
            total, _, count, slot_mass, slot_count = _mass_loop(base, start, V, lo, below, index, n_mass, n_count,
                                                                min_p, inv_t, m, SPLIT, BLOCK, SHIFT, out, False, False,
                                                                True)  # fmt: skip
        else:
            total, _, count, slot_mass, slot_count = _mass_loop(base, start, V, lo, below, index, 0, 0, min_p, inv_t,
                                                                m, SPLIT, BLOCK, SHIFT, out, False, False,
                                                                False)  # fmt: skip
    warp = tl.arange(0, WARPS)
    at = (3 + tl.arange(0, SAMPLES)[None, :]) * WARPS + warp[:, None]
    _store_sums(out + warp, total)
    _store_sums(out + 2 * WARPS + warp, count.to(tl.float64))
    _store_sums(out + at, slot_mass)
    _store_sums(out + SAMPLES * WARPS + at, slot_count.to(tl.float64))
    return total, count, slot_mass, slot_count


@triton.jit
def _tile(start, BLOCK: tl.constexpr):
    """Offsets of the ``[BLOCK / SUB, SUB]`` tile of entries from ``start``: a sub-block a warp."""
    return start + tl.arange(0, BLOCK // SUB)[:, None] * SUB + tl.arange(0, SUB)[None, :]


@triton.jit
def _mass_loop(base, start, V, lo, below, index, n_mass, n_count, min_p, inv_t, m, SPLIT, BLOCK: tl.constexpr,
               SHIFT: tl.constexpr, out, WHOLE: tl.constexpr, ABOVE: tl.constexpr, SLOTS: tl.constexpr):  # fmt: skip
    """:func:`_split_mass`'s pass: stores the sub-blocks' masses and returns the split's, with ``WHOLE`` the
    mass of all its entries (with ``ABOVE``, of those with a key ``>= lo``; else 0), the number of what can be
    drawn, and the slots' masses and numbers (none with ``ABOVE``, a late row's step 0), each as its warps' shares
    (``[WARPS]``, the slots' ``[WARPS, SAMPLES]``). A tile
    ``[BLOCK / SUB, SUB]`` holds a sub-block a warp: its sums need no exchange between warps. The slots' sums and
    the number stay in each thread until the end (a lane's share of a tile, summed where it holds it)."""
    N_SUB: tl.constexpr = BLOCK // SUB
    LANES: tl.constexpr = 32
    tl.static_assert(N_SUB == WARPS, "a sub-block a warp")
    floor = key_floor(lo, SHIFT)  # the rows drawn from are regular
    sub = tl.arange(0, N_SUB)
    tl.static_assert(SAMPLES - 1 == 3, "three slots: the largest candidate is never a lower record")
    b0, b1, b2 = _at(below, 0), _at(below, 1), _at(below, 2)  # once a pass
    per_warp = tl.zeros([N_SUB], tl.float64)
    every = tl.zeros([N_SUB], tl.float64)
    count = tl.zeros([N_SUB, LANES], tl.int32)
    mass0 = tl.zeros([N_SUB, LANES], tl.float64)  # each slot's, in each thread until the end
    mass1 = tl.zeros([N_SUB, LANES], tl.float64)
    mass2 = tl.zeros([N_SUB, LANES], tl.float64)
    count0 = tl.zeros([N_SUB, LANES], tl.int32)
    count1 = tl.zeros([N_SUB, LANES], tl.int32)
    count2 = tl.zeros([N_SUB, LANES], tl.int32)
    ahead = load_ahead(base, _tile(start, BLOCK), V, start + SPLIT)
    for i in range(0, SPLIT, BLOCK):
        offs = _tile(start + i, BLOCK)
        inb = offs < V
        x = ahead.to(tl.float32)
        ahead = load_ahead(base, offs + BLOCK, V, start + SPLIT)
        w = tl.exp(x * inv_t - m)
        w64 = tl.where(inb, w, 0.0).to(tl.float64)  # every sum of the tile selects from one conversion
        high = inb & (x >= floor)
        weighty = inb & (w >= min_p)
        sums = tl.sum(tl.where(high & weighty, w64, 0.0), axis=1)
        _store_sums(out + HEAD + i // SUB + sub, sums)
        per_warp += sums
        count += _lanes((high & weighty).to(tl.int32))
        if ABOVE:
            every += tl.sum(tl.where(high, w64, 0.0), axis=1)
        elif WHOLE:
            every += tl.sum(w64, axis=1)
        if SLOTS:  # weighs the slots (a loop of their own where none has any)
            if n_mass > 0:
                mass0 += _lanes(tl.where(weighty & (x >= b0), w64, 0.0))
            if n_mass > 1:
                mass1 += _lanes(tl.where(weighty & (x >= b1), w64, 0.0))
            if n_mass > 2:
                mass2 += _lanes(tl.where(weighty & (x >= b2), w64, 0.0))
            if n_count > 0:
                count0 += _lanes((weighty & (x >= b0)).to(tl.int32))
            if n_count > 1:
                count1 += _lanes((weighty & (x >= b1)).to(tl.int32))
            if n_count > 2:
                count2 += _lanes((weighty & (x >= b2)).to(tl.int32))
    i0, i1, i2 = _at(index, 0), _at(index, 1), _at(index, 2)
    c = tl.arange(0, SAMPLES)[None, :]
    slot_mass = _at_candidates(c, _warps(mass0), _warps(mass1), _warps(mass2), i0, i1, i2)
    slot_count = _at_candidates(c, _warps(count0), _warps(count1), _warps(count2), i0, i1, i2)
    return per_warp, every, tl.sum(count, axis=1), slot_mass, slot_count


@triton.jit
def _warps(lanes):
    """``[WARPS, 1]``: each warp's share of a sum from its lanes' (``[WARPS, 32]``)."""
    return tl.sum(lanes, axis=1)[:, None]


@triton.jit
def _at_candidates(c, slot0, slot1, slot2, i0, i1, i2):
    """The sums of slots 0, 1 and 2 put at their candidates' indices ``i0, i1, i2`` among candidates ``c`` (a
    slot past the last lower record has none: its sums are 0, its index 0)."""
    return tl.where(c == i0, slot0, 0) + tl.where(c == i1, slot1, 0) + tl.where(c == i2, slot2, 0)


@triton.jit
def _lanes(v):
    """``[BLOCK / SUB, 32]``: each lane's sum of its share of a tile ``v [BLOCK / SUB, SUB]`` (the entries a thread
    holds: no exchange between threads)."""
    return tl.sum(tl.reshape(v, [v.shape[0], 32, v.shape[1] // 32]), axis=2)


@triton.jit
def _at(v, c):
    """``v[c]`` of a ``[SAMPLES]`` vector, as a scalar."""
    return tl.sum(tl.where(tl.arange(0, SAMPLES) == c, v, 0), axis=0)


@triton.jit
def _four(v):
    """The four (:data:`SAMPLES`) entries of ``v [SAMPLES]`` as scalars: one exchange between threads where ``v``
    is spread over the warps (a candidate a warp, as a draw leaves them), none after it."""
    tl.static_assert(SAMPLES == 4, "an attempt of four candidates")
    even, odd = tl.split(tl.reshape(v, [2, 2]))
    v0, v2 = tl.split(even)
    v1, v3 = tl.split(odd)
    return v0, v1, v2, v3


@triton.jit
def _in_warp(v):
    """``v [SAMPLES]`` laid out anew in the lanes of every warp, through scalars (:func:`_four`): reductions
    over it then stay in a warp (no barrier), where Triton would keep a draw's layout, a candidate a warp."""
    v0, v1, v2, v3 = _four(v)
    c = tl.arange(0, SAMPLES)
    return tl.where(c == 0, v0, tl.where(c == 1, v1, tl.where(c == 2, v2, v3)))


@triton.jit
def _floors(cands, SHIFT: tl.constexpr):
    """``[SAMPLES]`` float32: the floors of the keys strictly above each candidate (:func:`key_floor`)."""
    return key_floor(row_key(_entry_value(cands), SHIFT) + 1, SHIFT)


@triton.jit
def _lower_records(cands, SHIFT: tl.constexpr):
    """``(role, below, index, n)`` of an attempt's candidates (``[SAMPLES]``, :func:`_entry`): each one's role in
    the check (:data:`LOWER`: a record below the largest, a key above every earlier candidate's and below the
    largest's; :data:`LARGEST`: the first with the largest key; :data:`NEVER`: one that never comes first among
    the kept ones), then slot by slot (in drawing order) the lower records' floors (:func:`_floors`; +inf past the
    last) and their candidates' indices, and their number. A pass weighs the lower records (:func:`_mass_loop`);
    the largest candidate is weighed by what can be drawn above it (the next attempt's masses)."""
    cands = _in_warp(cands)
    key = row_key(_entry_value(cands), SHIFT)
    c = tl.arange(0, SAMPLES)
    top = tl.max(key, axis=0)
    before = tl.max(tl.where(c[None, :] < c[:, None], key[None, :], LOWEST), axis=1)
    lower = (key > before) & (key < top)
    largest = c == tl.min(tl.where(key == top, c, SAMPLES), axis=0)
    slot = tl.cumsum(lower.to(tl.int32), axis=0) - lower.to(tl.int32)
    n = tl.sum(lower.to(tl.int32), axis=0)
    at = lower[None, :] & (slot[None, :] == c[:, None])  # [slot, candidate]
    below = tl.sum(tl.where(at, _floors(cands, SHIFT)[None, :], 0.0), axis=1)
    index = tl.sum(tl.where(at, c[None, :], 0), axis=1)
    role = tl.where(lower, LOWER, tl.where(largest, LARGEST, NEVER))
    return role, tl.where(c < n, below, float("inf")), index, n


@triton.jit
def _weighed(n, top_k, top_p, late):
    """``(n_mass, n_count)``: the lower records' slots a pass weighs, of ``n``: their masses where top-p is on,
    their numbers where top-k is, unless the row is ``late``: it draws from its top-k set alone, whose every
    entry has fewer than ``top_k`` larger keys."""
    return tl.where(top_p < 1.0, n, 0), tl.where((top_k > 0) & ~late, n, 0)


@triton.jit
def _check(cands, role, slot_mass, slot_count, mass, count, total, top_k, top_p, min_p, inv_t, m):
    """``(token, kept)`` (:func:`_first_kept`) of an attempt's candidates, given their roles
    (:func:`_lower_records`), the masses and numbers above its lower records (``[SAMPLES]``, at their candidates'
    indices) and above its largest (``mass``, ``count``: what can be drawn next)."""
    above = tl.where(role == LOWER, slot_mass, tl.where(role == LARGEST, mass, float("inf")))
    larger = tl.where(role == LOWER, slot_count, tl.where(role == LARGEST, count, 2**62))
    return _first_kept(cands, above, larger, total, top_k, top_p, min_p, inv_t, m)


@triton.jit
def _past(cands, SHIFT: tl.constexpr):
    """The pivot past an attempt that kept none of its candidates: the key past the largest."""
    return tl.max(row_key(_entry_value(cands), SHIFT), axis=0) + 1


@triton.jit
def _pool_mass_loop(base, start, V, lo, min_p, inv_t, m, SPLIT, SHIFT: tl.constexpr, out, pool,
                    POOL: tl.constexpr, MIN_P: tl.constexpr):  # fmt: skip
    """:func:`_mass_loop` with ``WHOLE`` over the entries with a key ``>= lo`` (a late row's top-k set):
    returns the warps' shares (``[WARPS]``) of the split's mass of what can be drawn and of the set's, and lists
    the set in ``pool`` (int64 ``[WARPS + WARPS * POOL]``): warp ``i`` takes the ``i``-th quarter of the split
    (its sub-blocks in turn) and lists its entries of the set in vocabulary order at ``pool[WARPS + i * POOL]``
    (``x`` as float32 bits in the low word, the index in the high word), as many as fit, and their number at
    ``pool[i]``. Without ``MIN_P`` (the row has none), what can be drawn is the set: one sum is both."""
    Q = tl.multiple_of(SPLIT // WARPS, SUB)  # a split is a multiple of WARPS * SUB entries
    floor = key_floor(lo, SHIFT)
    warp = tl.arange(0, WARPS)
    per_warp = tl.zeros([WARPS], tl.float64)
    every = tl.zeros([WARPS], tl.float64)
    listed = tl.zeros([WARPS], tl.int32)
    offs = start + warp[:, None] * Q + tl.arange(0, SUB)[None, :]
    ahead = load_ahead(base, offs, V, start + SPLIT)
    for i in range(0, Q, SUB):
        inb = offs < V
        x = ahead.to(tl.float32)
        ahead = load_ahead(base, offs + SUB, V, start + SPLIT)
        w = tl.exp(x * inv_t - m)
        high = inb & (x >= floor)
        live = high & (w >= min_p) if MIN_P else high
        sums = tl.sum(tl.where(live, w, 0.0).to(tl.float64), axis=1)
        _store_sums(out + HEAD + (warp * Q + i) // SUB, sums)
        per_warp += sums
        if MIN_P:
            every += tl.sum(tl.where(high, w, 0.0).to(tl.float64), axis=1)
        h = high.to(tl.int32)
        at = listed[:, None] + tl.cumsum(h, axis=1) - h
        entry = _entry(offs, x)
        _store_entries(pool + WARPS + warp[:, None] * POOL + at, entry, high & (at < POOL))
        listed += tl.sum(h, axis=1)
        offs += SUB
    tl.store(pool + warp, listed.to(tl.int64))
    return per_warp, every if MIN_P else per_warp


@triton.jit
def list_late_split(base, start, V, lo, hi, SPLIT, SHIFT: tl.constexpr, pool, POOL: tl.constexpr):
    """A late row's last count of its top-k search (:func:`late_list`) over the split ``[start, start +
    SPLIT) ∩ [0, V)``: the ``[16]`` int32 counts of ``[lo, hi)``'s buckets, as the round's pass makes them,
    and the entries with a key ``>= lo`` (the top-k set, and the rest of ``[lo, hi)``) listed in ``pool``
    (int64 ``[WARPS + WARPS * POOL]``): warp ``i`` takes the ``i``-th quarter of the split (its sub-blocks in
    turn) and lists its entries in vocabulary order at ``pool[WARPS + i * POOL]`` (``x`` as float32 bits in
    the low word, the index in the high word), as many as fit, and their number at ``pool[i]``."""
    Q = tl.multiple_of(SPLIT // WARPS, SUB)  # a split is a multiple of WARPS * SUB entries
    shift = bucket_log2(lo, hi).to(tl.uint32)
    lo32 = lo.to(tl.int32)
    width = (hi - lo).to(tl.uint32)  # a key k is in [lo, hi) when k - lo, unsigned, is below it
    warp = tl.arange(0, WARPS)
    c0 = tl.zeros([WARPS, SUB], tl.int32)  # add_counts's words, a lane each
    c1 = tl.zeros([WARPS, SUB], tl.int32)
    c2 = tl.zeros([WARPS, SUB], tl.int32)
    c3 = tl.zeros([WARPS, SUB], tl.int32)
    listed = tl.zeros([WARPS], tl.int32)
    offs = start + warp[:, None] * Q + tl.arange(0, SUB)[None, :]
    ahead = load_ahead(base, offs, V, start + SPLIT)
    for _ in range(0, Q, SUB):
        inb = offs < V
        x = ahead
        ahead = load_ahead(base, offs + SUB, V, start + SPLIT)
        key = regular_key(x, SHIFT)
        above = (key - lo32).to(tl.uint32, bitcast=True)
        c0, c1, c2, c3 = add_counts(c0, c1, c2, c3, (above >> shift).to(tl.int32), inb & (above < width))
        high = inb & (key >= lo32)
        h = high.to(tl.int32)
        at = listed[:, None] + tl.cumsum(h, axis=1) - h
        entry = _entry(offs, x.to(tl.float32))
        _store_entries(pool + WARPS + warp[:, None] * POOL + at, entry, high & (at < POOL))
        listed += tl.sum(h, axis=1)
        offs += SUB
    tl.store(pool + warp, listed.to(tl.int64))
    LANES: tl.constexpr = WARPS * SUB
    return bucket_totals(tl.reshape(c0, [LANES]), tl.reshape(c1, [LANES]), tl.reshape(c2, [LANES]),
                         tl.reshape(c3, [LANES]))  # fmt: skip


@triton.jit
def _store_sums(ptr, sums):
    """``ptr[j] = sums[j]`` for a tile's ``[BLOCK / SUB]`` sub-block sums (float64 or float32), where the
    reduction leaves them: a sum in its sub-block's warp. ``tl.store`` would first move them to the
    lanes of one warp through shared memory (Triton lays a store's pointers out for coalescing), two
    barriers an iteration of the loops that store them; the interpreter has no PTX, and stores them so."""
    if PTX_STORES:
        address = ptr.to(tl.int64, bitcast=True)
        if sums.dtype == tl.float64:
            tl.inline_asm_elementwise("st.global.f64 [$1], $2; mov.u32 $0, 0;", "=r,l,d", [address, sums],
                                      dtype=tl.int32, is_pure=False, pack=1)  # fmt: skip
        else:
            tl.inline_asm_elementwise("st.global.f32 [$1], $2; mov.u32 $0, 0;", "=r,l,f", [address, sums],
                                      dtype=tl.int32, is_pure=False, pack=1)  # fmt: skip
    else:
        tl.store(ptr, sums)


@triton.jit
def _store_entries(ptr, entries, mask):
    """``ptr[i] = entries[i]`` (int64) where ``mask``, from the threads that hold them: a ``tl.store`` would
    first lay them out for coalescing through shared memory, which the pool's scattered writes do not gain
    from (as :func:`_store_sums`)."""
    if PTX_STORES:
        address = ptr.to(tl.int64, bitcast=True)
        tl.inline_asm_elementwise("{ .reg .pred p; setp.ne.b32 p, $3, 0; @p st.global.b64 [$1], $2; } mov.u32 $0, 0;",
                                  "=r,l,l,r", [address, entries, mask.to(tl.int32)], dtype=tl.int32, is_pure=False,
                                  pack=1)  # fmt: skip
    else:
        tl.store(ptr, entries, mask=mask)


@triton.jit
def _pick(mass, goal, N_P2: tl.constexpr):
    """``(index, goal left in it)``: the entry of ``mass [N_P2]`` (float64, >= 0) where the cumulative mass
    passes ``goal``, or the last one of positive mass if float sums leave none."""
    i = tl.arange(0, N_P2)
    last = tl.max(tl.where(mass > 0, i, 0), axis=0)
    chosen = tl.minimum(tl.min(tl.where(tl.cumsum(mass, axis=0) > goal, i, N_P2), axis=0), last)
    return chosen, goal - tl.sum(tl.where(i < chosen, mass, 0.0), axis=0)


@triton.jit
def _draw(base, V, part, split_mass, u, lo, min_p, inv_t, m, SPLIT, NB_P2: tl.constexpr, SHIFT: tl.constexpr):
    """An attempt's candidates (:func:`_entry` ``[SAMPLES]``): the entries that numbers ``u [SAMPLES]`` pick by
    inverse CDF among those that can be drawn (a key ``>= lo`` and ``w >= min_p``), given ``part`` (the row's
    ``[n_splits, HEAD + sub-blocks]`` float64 masses of :func:`_split_mass`) and its splits' masses
    ``split_mass`` (``[NS_P2]``, 0 past the last split, as the caller loaded them): the split where the
    cumulative mass passes ``u`` times the total, the sub-block in it, then the entry in the sub-block
    (:func:`_scan`). One sub-block is read a candidate, whatever the split's size, and the candidates' loads
    are made together."""
    per_split = HEAD + tl.cdiv(SPLIT, SUB)
    chosen, local = _pick_splits(split_mass, u)
    bi = tl.arange(0, NB_P2)[None, :]
    block_mass = tl.load(
        part + chosen[:, None] * per_split + HEAD + bi, mask=bi < per_split - HEAD, other=0.0, cache_modifier=".cg"
    )  # stored by other programs (L2)
    block, local = _pick_rows(block_mass, local)
    return _scan(base, V, chosen.to(tl.int64) * SPLIT + block * SUB, local, lo, min_p, inv_t, m, SHIFT)


@triton.jit
def _pick_splits(split_mass, u):
    """``(split, goal left in it)`` ``[SAMPLES]`` each: for each goal ``u`` times the splits' total mass, the split
    of ``split_mass [NS_P2]`` (float64, >= 0) where the cumulative mass passes it, or the last one of positive mass
    if float sums leave none (one cumulative sum for every candidate)."""
    N_P2: tl.constexpr = split_mass.shape[0]
    goal = u.to(tl.float64) * tl.sum(split_mass, axis=0)
    i = tl.arange(0, N_P2)[None, :]
    last = tl.max(tl.where(split_mass > 0, tl.arange(0, N_P2), 0), axis=0)
    passed = tl.cumsum(split_mass, axis=0)[None, :] > goal[:, None]
    chosen = tl.minimum(tl.min(tl.where(passed, i, N_P2), axis=1), last)
    return chosen, goal - tl.sum(tl.where(i < chosen[:, None], split_mass[None, :], 0.0), axis=1)


@triton.jit
def _pick_rows(mass, goal):
    """``(index, goal left in it)`` ``[S]`` each: the entry of each row of ``mass [S, N_P2]`` (float64, >= 0) where
    its cumulative mass passes the row's ``goal [S]``, or its last one of positive mass if float sums leave none."""
    N_P2: tl.constexpr = mass.shape[1]
    i = tl.arange(0, N_P2)[None, :]
    last = tl.max(tl.where(mass > 0, i, 0), axis=1)
    chosen = tl.minimum(tl.min(tl.where(tl.cumsum(mass, axis=1) > goal[:, None], i, N_P2), axis=1), last)
    return chosen, goal - tl.sum(tl.where(i < chosen[:, None], mass, 0.0), axis=1)


@triton.jit
def _scan(base, V, start, local, lo, min_p, inv_t, m, SHIFT: tl.constexpr):
    """Entries (:func:`_entry`) ``[SAMPLES]``: for each candidate, the entry of the sub-block at ``start[c]`` where
    the cumulative weight (float64) of those that can be drawn (a key ``>= lo`` and ``w >= min_p``) passes
    ``local[c]``, the last one of positive weight where float sums leave none (-1 if none has any)."""
    offs = start[:, None] + tl.arange(0, SUB)[None, :]
    inb = offs < V
    x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
    w = tl.exp(x * inv_t - m)
    w = tl.where(inb & (x >= key_floor(lo, SHIFT)) & (w >= min_p), w, 0.0).to(tl.float64)
    entry = _entry(offs, x)
    hit = tl.min(tl.where((w > 0) & (tl.cumsum(w, axis=1) > local[:, None]), entry, 2**62), axis=1)
    return tl.where(hit < 2**62, hit, tl.max(tl.where(w > 0, entry, -1), axis=1))


@triton.jit
def _entry(offs, x):
    """int64 entries of a list (the pool's, :func:`_pool_mass_loop`) from the indices ``offs`` and their
    float32 values ``x``: the index in the high word, ``x``'s bits in the low one. Non-negative, and in the
    indices' order."""
    return (offs.to(tl.int64) << 32) | (x.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF)


@triton.jit
def _entry_value(entry):
    """The float32 value an :func:`_entry` holds."""
    return (entry & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def _first_draw(base, V, part, peak, n_splits, u, inv_t, m, SPLIT, NS_P2: tl.constexpr, NB_P2: tl.constexpr,
                SHIFT: tl.constexpr):  # fmt: skip
    """A row's first attempt's candidates (:func:`_entry` ``[SAMPLES]``,
    :func:`.chain_sampling_ref.first_pivot_draw`) by numbers ``u [SAMPLES]``, from what :func:`_sub_block_stats`
    stored for each split: a sub-block's mass ``s`` over its peak ``p`` in ``part`` (:func:`_split_mass`'s slots),
    ``p`` in ``peak [n_splits, sub-blocks]``. Its mass is ``s * exp(p - m)``: the split, then the sub-block, where
    the cumulative mass passes ``u`` times the row's, then the entry (:func:`_scan`). The split masses sum
    :data:`FIRST_CHUNK` sub-blocks of every split a step (few registers)."""
    n_sub = tl.cdiv(SPLIT, SUB)
    sp = tl.arange(0, NS_P2)
    split_mass = tl.zeros([NS_P2], tl.float64)
    for c in range(0, n_sub, FIRST_CHUNK):
        bi = c + tl.arange(0, FIRST_CHUNK)
        there = (sp[:, None] < n_splits) & (bi[None, :] < n_sub)
        split_mass += tl.sum(_sub_block_masses(part, peak, sp[:, None], bi[None, :], there, n_sub, m), axis=1)
    chosen, local = _pick_splits(split_mass, u)
    bi = tl.arange(0, NB_P2)[None, :]
    block, local = _pick_rows(_sub_block_masses(part, peak, chosen[:, None], bi, bi < n_sub, n_sub, m), local)
    return _scan(base, V, chosen.to(tl.int64) * SPLIT + block * SUB, local, LOWEST, 0.0, inv_t, m, SHIFT)


@triton.jit
def _sub_block_masses(part, peak, sp, bi, there, n_sub, m):
    """``s * exp(p - m)`` (float64) of sub-blocks ``bi`` of splits ``sp`` where ``there`` (0 elsewhere),
    from the ``s`` and ``p`` other programs stored (read from L2)."""
    s = tl.load(part + sp * (HEAD + n_sub) + HEAD + bi, mask=there, other=0.0, cache_modifier=".cg")
    p = tl.load(peak + sp * n_sub + bi, mask=there, other=float("-inf"), cache_modifier=".cg")
    return tl.where(p > float("-inf"), s * tl.exp(p - m).to(tl.float64), 0.0)


@triton.jit
def _sub_block_stats(base, start, V, inv_t, SPLIT, BLOCK: tl.constexpr, SHIFT: tl.constexpr, mass_out, peak_out):
    """:func:`._sampling_filter.split_stats` of a pivot row's split, and for its ``i``-th sub-block the peak
    ``p = max z`` (float32) at ``peak_out[i]`` and the float64 sum of its ``exp(z - p)`` at ``mass_out[i]``:
    masses that need no ``max z`` of the row yet. A tile ``[BLOCK / SUB, SUB]`` holds a sub-block a warp."""
    N_SUB: tl.constexpr = BLOCK // SUB
    sub = tl.arange(0, N_SUB)
    g_best = tl.full([N_SUB, SUB], -2147483648, tl.int32)
    g_idx = tl.zeros([N_SUB, SUB], tl.int32)
    k_min = tl.full([N_SUB, SUB], 2147483647, tl.int32)
    z_max = tl.full([N_SUB], float("-inf"), tl.float32)
    ahead = load_ahead(base, _tile(start, BLOCK), V, start + SPLIT)
    for i in range(0, SPLIT, BLOCK):
        offs = _tile(start + i, BLOCK)
        inb = offs < V
        x = ahead.to(tl.float32)
        ahead = load_ahead(base, offs + BLOCK, V, start + SPLIT)
        g_best, g_idx, key = track_argmax(g_best, g_idx, x, inb, offs)
        k_min = tl.minimum(k_min, tl.where(inb, key >> SHIFT, 2147483647))
        z = x * inv_t
        p = tl.max(z, axis=1)
        w = tl.where((p > float("-inf"))[:, None], tl.exp(z - p[:, None]), 0.0)
        _store_sums(mass_out + i // SUB + sub, tl.sum(w.to(tl.float64), axis=1))
        _store_sums(peak_out + i // SUB + sub, p)
        z_max = tl.maximum(z_max, p)
    gk = tl.max(tl.max(g_best, axis=1), axis=0)
    gi = tl.min(tl.min(tl.where(g_best == gk, g_idx, 2147483647), axis=1), axis=0)
    return gk, gi, tl.max(z_max, axis=0), tl.min(tl.min(k_min, axis=1), axis=0)


@triton.jit
def _stream(seed_ptr, offset_ptr, row, K1):
    """``(seed, stream)`` of ``row``'s request, which :func:`_number` takes: loaded where the row's other loads
    are, so that no draw waits for them."""
    b = row // K1
    return tl.load(seed_ptr + b), verify_stream(tl.load(offset_ptr + b), K1)


@triton.jit
def _number(seed, stream, row, K1, draw_no):
    """The numbers ``[SAMPLES]`` of attempt ``draw_no`` of ``row``'s candidates: :func:`.philox.pivot_counter` in
    the request's ``stream``."""
    return tl.rand(seed, stream | (K1 + 1 + (draw_no * SAMPLES + tl.arange(0, SAMPLES)) * K1 + row % K1))


@jit_any_batch
def _stats_kernel(logits_ptr, stride_b, stride_j, temp_ptr, topk_ptr, topp_ptr, minp_ptr, seed_ptr, offset_ptr,
                  gkey_ptr, gidx_ptr, zmax_ptr, kmin_ptr, kmax_ptr, lo_ptr, y_ptr, total_ptr, part_ptr, peak_ptr,
                  count_ptr, maxima_ptr, first_ptr, state_ptr, V, K1, n_splits, SPLIT, BLOCK: tl.constexpr,
                  NS_P2: tl.constexpr, NB_P2: tl.constexpr, SHIFT: tl.constexpr, M: tl.constexpr, LATE: tl.constexpr,
                  GDC: tl.constexpr):  # fmt: skip
    """The filtered class's stats launch (:func:`._sampling_filter.split_stats` per (row, split)) when pivot requests
    draw. Their programs store their sub-blocks' masses too (:func:`_sub_block_stats`), and the row's last program to
    store them (an atomic count) stores every row's search state before the rounds
    (:func:`._sampling_filter.initial_state`, ``state_ptr [rows, STATE]``) and makes a pivot row's first attempt: ``lo``
    holds the key past its largest candidate and the candidates (the rounds check them), ``y`` a candidate's token
    (drawn), and ``total [rows, 2]`` its ``m`` (:func:`pivot_buffers`). A row with min-p gets ``y = -3`` and ``lo`` one
    above the lowest key (it makes its first attempt in the rounds), a row that does not draw ``y = -1`` (its argmax)
    and the lowest key, other requests' rows (late ones' too, until they start) ``y = -2``. The rows of small top-k
    requests store their argmax and ``M`` subset maxima instead (:func:`._sampling_topk.split_maxima`): the rounds find
    their bound from them. Those of late requests count their split's entries in the 16
    :func:`._sampling_filter.first_bucket` buckets too, at ``first_ptr [rows, n_splits, 16]``: the first count of their
    top-k search (:func:`._sampling_filter.initial_state`). Without ``LATE`` (the batch promises no late request) a late
    request's rows draw here as the others do (see :func:`.chain_verify_sampling`)."""
    if GDC:  # a dependent launch: the kernel before it has ended first
        after_previous()
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    b = row // K1
    t = tl.load(temp_ptr + b).to(tl.float32)
    inv_t = 1.0 / tl.where(t > 0, t, 1.0)
    base = logits_ptr + b * stride_b + (row % K1) * stride_j
    start = sp.to(tl.int64) * SPLIT
    per_split = HEAD + tl.cdiv(SPLIT, SUB)
    part = part_ptr + row * n_splits * per_split
    peak = peak_ptr + row * n_splits * (per_split - HEAD)
    k = tl.load(topk_ptr + b).to(tl.int64)
    top_p = tl.load(topp_ptr + b)
    late = late_pivot_request(t, k, top_p) & LATE  # draws from its top-k cut, whose search starts here
    pivot = pivot_request(t, k, top_p) & ~late
    first = pivot & (tl.load(minp_ptr + b) <= 0)  # draws here; with min-p, in the rounds (from its set)
    if first:
        masses_out = part + sp * per_split + HEAD
        gk, gi, z_max, k_min = _sub_block_stats(base, start, V, inv_t, SPLIT, BLOCK, SHIFT, masses_out,
                                                peak + sp * (per_split - HEAD))  # fmt: skip
        store_stats(row * n_splits + sp, gk, gi, z_max, k_min, gkey_ptr, gidx_ptr, zmax_ptr, kmin_ptr, kmax_ptr, SHIFT)
    elif small_top_k_request(t, k):
        out = row * n_splits + sp
        gk, gi = split_maxima(base, sp * SPLIT, V, SPLIT, BLOCK, M, maxima_ptr + out * M)
        tl.store(gkey_ptr + out, gk)
        tl.store(gidx_ptr + out, gi)
    elif late:
        gk, gi, z_max, k_min, counts = split_counts(base, start, V, inv_t, SPLIT, BLOCK, SHIFT)
        store_stats(row * n_splits + sp, gk, gi, z_max, k_min, gkey_ptr, gidx_ptr, zmax_ptr, kmin_ptr, kmax_ptr, SHIFT)
        tl.store(first_ptr + (row * n_splits + sp) * NBINS + tl.arange(0, NBINS), counts)
    else:
        gk, gi, z_max, k_min = split_stats(base, start, V, inv_t, SPLIT, BLOCK, SHIFT)
        store_stats(row * n_splits + sp, gk, gi, z_max, k_min, gkey_ptr, gidx_ptr, zmax_ptr, kmin_ptr, kmax_ptr, SHIFT)
    tl.debug_barrier()  # every thread's stores are issued before the count says so
    if tl.atomic_add(count_ptr + row, 1, sem="acq_rel", scope="gpu") == n_splits - 1:
        tl.store(count_ptr + row, 0)
        store_initial_state(state_ptr, row, K1, V, n_splits, temp_ptr, topk_ptr, topp_ptr, kmin_ptr, kmax_ptr, gkey_ptr,
                            zmax_ptr, first_ptr, NS_P2, SHIFT, True, LATE)  # fmt: skip
        token = row * 0 + NOT_PIVOT  # tensor first: a constexpr first would stay one (Triton 3.9's interpreter)
        lo = row * 0 + LOWEST
        cands = tl.zeros([SAMPLES], tl.int64)
        if pivot:
            seed, stream = _stream(seed_ptr, offset_ptr, row, K1)
            _, active, _, m = _row_facts(row, K1, n_splits, temp_ptr, topk_ptr, topp_ptr, gkey_ptr, zmax_ptr, NS_P2)
            tl.store(total_ptr + 2 * row + 1, m)
            token = row * 0 + ARGMAX
            if active:
                token = row * 0 + UNDRAWN
                lo = row * 0 + (LOWEST + 1)
                if first:
                    u = _number(seed, stream, row, K1, 0)
                    cands = _first_draw(base, V, part, peak, n_splits, u, inv_t, m, SPLIT, NS_P2, NB_P2, SHIFT)
                    token = tl.max(cands, axis=0) >> 32  # drawn: checked in the rounds
                    lo = _past(cands, SHIFT)
        tl.store(y_ptr + row, token)
        _store_pivot(lo_ptr, row, lo, cands, row >= 0, SHIFT)  # every row's: a late row's start reads them


@triton.jit
def _kept(x, mass_above, count_above, total, top_k, top_p, min_p, inv_t, m):
    """``[SAMPLES]``: whether each candidate, of float32 value ``x``, is in the kept set: fewer than ``top_k``
    strictly larger keys (top-k on), their mass ``< top_p *`` the total (top-p on), and its weight ``>= min_p``.
    The row's settings are scalars: each condition is a ``where`` on its setting (no scalar ``|`` vector)."""
    w = tl.exp(x * inv_t - m)
    in_top_p = tl.where(top_p < 1.0, (mass_above < top_p.to(tl.float64) * total).to(tl.int32), 1)
    in_top_k = tl.where(top_k > 0, (count_above < top_k).to(tl.int32), 1)
    weighty = tl.where(min_p > 0, (w >= min_p).to(tl.int32), 1)
    return (in_top_p & in_top_k & weighty) != 0


@triton.jit
def _first_kept(cands, mass_above, count_above, total, top_k, top_p, min_p, inv_t, m):
    """``(token, kept)``: an attempt's first candidate (of ``cands [SAMPLES]``, :func:`_entry`) in the kept set
    (:func:`_kept`, by the mass and number of the entries above each), or the first candidate's token and
    false if none is. Two reductions over the candidates: in a warp where they lie in its lanes (:func:`_in_warp`),
    else each one a round through shared memory."""
    c = tl.arange(0, SAMPLES)
    kept = _kept(_entry_value(cands), mass_above, count_above, total, top_k, top_p, min_p, inv_t, m)
    first = tl.min(tl.where(kept, c, SAMPLES), axis=0)  # the first kept wins
    return tl.sum(tl.where(c == first % SAMPLES, cands, 0), axis=0) >> 32, first < SAMPLES


@triton.jit
def _store_pivot(lo_ptr, row, lo, cands, records, SHIFT: tl.constexpr):
    """Store a row's pivot ``lo``, its last attempt's candidates ``[SAMPLES]`` and, with ``records`` (the
    launches after it check the attempt), their records (:data:`LO_WORDS`), from the threads that hold them
    (:func:`_store_entries`)."""
    words = lo_ptr + row * LO_WORDS
    c = tl.arange(0, SAMPLES)
    every = c >= 0
    tl.store(words, lo)
    _store_entries(words + CANDS + c, cands, every)
    if records:
        role, below, index, n = _lower_records(cands, SHIFT)
        tl.store(words + RECORDS, n.to(tl.int64))
        _store_entries(words + ROLES + c, role.to(tl.int64), every)
        _store_entries(words + FLOORS + c, below.to(tl.int32, bitcast=True).to(tl.int64), every)
        _store_entries(words + INDICES + c, index.to(tl.int64), every)


@triton.jit
def _split_sums(splits, q, n_splits):
    """``[NS_P2]`` float64: sum ``q`` of each split at ``splits`` (:data:`HEAD`), its warps' shares added up (0
    past ``n_splits``), stored by the row's other programs (read from L2)."""
    there = tl.arange(0, splits.shape[0]) < n_splits
    sums = tl.load(splits + q * WARPS, mask=there, other=0.0, cache_modifier=".cg")
    for w in tl.static_range(1, WARPS):  # a load a warp's share: no exchange between warps
        sums += tl.load(splits + q * WARPS + w, mask=there, other=0.0, cache_modifier=".cg")
    return sums


@triton.jit
def _head_sums(part, per_split, n_splits, NS_P2: tl.constexpr):
    """``[SUMS_P2]`` float64: each of a row's :data:`SUMS`, its splits' and warps' shares (:data:`HEAD`, stored by
    the row's other programs in ``part``: read from L2) added up, from one load and one exchange between warps
    (a thread holds every sum of its share: the warps' shares lie along the threads, 128 at least)."""
    J: tl.constexpr = max(NS_P2 * WARPS, 32 * WARPS)
    j = tl.arange(0, J)[None, :]  # a split's warp
    q = tl.arange(0, SUMS_P2)[:, None]
    shares = tl.load(part + (j // WARPS) * per_split + q * WARPS + j % WARPS, mask=(j < n_splits * WARPS) & (q < SUMS),
                     other=0.0, cache_modifier=".cg")  # fmt: skip
    return tl.sum(shares, axis=1)


@triton.jit
def _sum_at(sums, q):
    """Sum ``q`` of :func:`_head_sums`, as a scalar (a thread holds them all: no exchange)."""
    return tl.sum(tl.where(tl.arange(0, SUMS_P2) == q, sums, 0.0), axis=0)


@triton.jit
def _slot_sums(sums, first):
    """``[SAMPLES]``: sums ``first + c`` of :func:`_head_sums` (the slots' masses or numbers, at their candidates'
    indices), laid out in the lanes of every warp (:func:`_in_warp`) without an exchange."""
    c = tl.arange(0, SAMPLES)
    return tl.where(c == 0, _sum_at(sums, first), tl.where(c == 1, _sum_at(sums, first + 1),
                    tl.where(c == 2, _sum_at(sums, first + 2), _sum_at(sums, first + 3))))  # fmt: skip


@triton.jit
def _draw_step(logits_ptr, stride_b, stride_j, topk_ptr, topp_ptr, minp_ptr, seed_ptr, offset_ptr, lo_ptr, y_ptr,
               total_ptr, part_ptr, pool_ptr, lists, d, last, late, row, inv_t, m, V, K1, n_splits, SPLIT,
               BLOCK: tl.constexpr, NS_P2: tl.constexpr, NB_P2: tl.constexpr, SHIFT: tl.constexpr,
               ROUNDS: tl.constexpr, POOL: tl.constexpr, START: tl.constexpr):  # fmt: skip
    """The check of attempt ``d - 1`` of a row (``d >= 1``) by the masses just stored (those above each of its
    candidates; with ``d == 1``, the first, beside the mass of every entry (of a ``late`` row's top-k set), the
    total the checks compare with), then, if it kept none, attempt ``d``; in the ``last`` launch then on alone, a
    pass over the row and a check, then an attempt, at a time. Past ``ROUNDS`` attempts the row takes its argmax.
    A row done (a candidate kept, or its argmax) sets ``lo`` to the lowest key, which the launches after it
    skip."""
    b = row // K1
    sp = tl.arange(0, NS_P2)
    c = tl.arange(0, SAMPLES)
    base = logits_ptr + b * stride_b + (row % K1) * stride_j
    top_k = tl.load(topk_ptr + b).to(tl.int64)
    top_p = tl.load(topp_ptr + b)
    min_p = tl.load(minp_ptr + b).to(tl.float32)
    per_split = HEAD + tl.cdiv(SPLIT, SUB)
    part = part_ptr + row * n_splits * per_split
    splits = part + sp * per_split
    seed, stream = _stream(seed_ptr, offset_ptr, row, K1)  # loaded beside the masses: the draw needs no more
    split_mass = _split_sums(splits, 0, n_splits)
    sums = _head_sums(part, per_split, n_splits, NS_P2)
    if d == 1:
        total = _sum_at(sums, 1)
        tl.store(total_ptr + 2 * row, total)
    else:
        total = tl.load(total_ptr + 2 * row)
    words = lo_ptr + row * LO_WORDS
    lo = tl.load(words)
    cands = tl.load(words + CANDS + c)
    if START:  # a late row's start: no attempt to check yet
        token = tl.max(cands, axis=0) >> 32
        kept = row < 0
    else:
        slot_mass = _slot_sums(sums, 3)
        slot_count = _slot_sums(sums, 3 + SAMPLES).to(tl.int64)
        token, kept = _check(cands, tl.load(words + ROLES + c), slot_mass, slot_count, _sum_at(sums, 0),
                             _sum_at(sums, 2).to(tl.int64), total, top_k, top_p, min_p, inv_t, m)  # fmt: skip
        kept = kept & (tl.load(y_ptr + row) >= 0)  # else UNDRAWN: a row with min-p makes its first attempt now
    draw_no = d - ((min_p > 0) | late).to(tl.int64)  # with min-p or late, each attempt a step after the others
    drawing = ~kept & (draw_no < ROUNDS)
    pending = drawing & ~last  # an attempt that the next launch checks
    while drawing:
        u = _number(seed, stream, row, K1, draw_no)
        cands = _in_warp(_draw(base, V, part, split_mass, u, lo, min_p, inv_t, m, SPLIT, NB_P2, SHIFT))
        lo = _past(cands, SHIFT)
        token = tl.max(cands, axis=0) >> 32  # drawn
        draw_no += 1
        if last:  # its check, here: the masses above its candidates, split by split, and those the next reads
            tl.debug_barrier()  # every thread has read the masses of the last attempt
            lone_mass = tl.zeros([WARPS], tl.float64)  # the warps' shares, added up once
            lone_count = tl.zeros([WARPS], tl.int32)
            lone_slot_mass = tl.zeros([WARPS, SAMPLES], tl.float64)
            lone_slot_count = tl.zeros([WARPS, SAMPLES], tl.int32)
            role, below, index, n = _lower_records(cands, SHIFT)
            n_mass, n_count = _weighed(n, top_k, top_p, late)
            for s in range(0, n_splits):
                s_mass, s_count, s_slot_mass, s_slot_count = _split_mass(
                    base, s * SPLIT, V, lo, below, index, n_mass, n_count, min_p, inv_t, m, SPLIT, BLOCK, SHIFT,
                    part + s * per_split, False, pool_ptr, lists, 0, False)  # fmt: skip
                lone_mass += s_mass
                lone_count += s_count
                lone_slot_mass += s_slot_mass
                lone_slot_count += s_slot_count
            tl.debug_barrier()  # and they see the new ones
            split_mass = _split_sums(splits, 0, n_splits)
            slot_count = tl.sum(lone_slot_count, axis=0).to(tl.int64)
            token, kept = _check(cands, role, tl.sum(lone_slot_mass, axis=0), slot_count, tl.sum(lone_mass, axis=0),
                                 tl.sum(lone_count, axis=0).to(tl.int64), total, top_k, top_p, min_p, inv_t,
                                 m)  # fmt: skip
            drawing = ~kept & (draw_no < ROUNDS)
        else:
            drawing = draw_no < 0
    if START & (POOL > 0):  # noqa: SIM102 (a constexpr) a late row's first attempt: with its set listed, it ends here
        if pending & lists:
            pool_row = pool_ptr + row * n_splits * (WARPS + WARPS * POOL)
            j = tl.arange(0, NS_P2 * WARPS)
            listed = _region_counts(pool_row, j, n_splits * WARPS, POOL)
            if tl.max(listed, axis=0) <= POOL:
                token, kept = _pool_draws(pool_row, j, listed, cands, lo, draw_no, total, top_k, top_p, min_p, inv_t,
                                          m, seed, stream, row, K1, SHIFT, POOL, ROUNDS)  # fmt: skip
                pending = row < 0
    tl.store(y_ptr + row, tl.where(kept | pending, token, ARGMAX))
    _store_pivot(lo_ptr, row, tl.where(pending, lo, LOWEST), cands, pending, SHIFT)


@triton.jit
def _pool_draws(pool_row, j, listed, cands, lo, draw_no, total, top_k, top_p, min_p, inv_t, m, seed, stream, row, K1,
                SHIFT: tl.constexpr, POOL: tl.constexpr, ROUNDS: tl.constexpr):  # fmt: skip
    """``(token, kept)``: a late row's attempts to the end, by its program that made attempt ``draw_no - 1``
    (``cands``; ``lo`` the key past them), from the pool ``pool_row [n_splits, WARPS + WARPS * POOL]`` whose regions
    ``j`` (``[NS_P2 * WARPS]``, in vocabulary order) list every entry at or above its cut (``listed`` entries each;
    :func:`list_late_split` or :func:`_pool_mass_loop`), as the launches would make them by passes over the row: the
    check of the last attempt (:func:`_pool_check`), then, if it kept none, the next attempt from there (for each
    candidate the region where the cumulative mass passes its goal, then the entry in it), up to ``ROUNDS``
    attempts."""
    masses, token, kept = _pool_check(pool_row, j, listed, cands, lo, total, top_k, top_p, min_p, inv_t, m, SHIFT,
                                      POOL)  # fmt: skip
    drawing = ~kept & (draw_no < ROUNDS)
    while drawing:
        cands = _pool_attempt(pool_row, j, listed, masses, seed, stream, row, K1, draw_no, lo, min_p, inv_t, m, SHIFT,
                              POOL)  # fmt: skip
        lo = _past(cands, SHIFT)
        draw_no += 1
        masses, token, kept = _pool_check(pool_row, j, listed, cands, lo, total, top_k, top_p, min_p, inv_t, m, SHIFT,
                                          POOL)  # fmt: skip
        drawing = ~kept & (draw_no < ROUNDS)
    return token, kept


@triton.jit
def _pool_attempt(pool_row, j, listed, masses, seed, stream, row, K1, draw_no, lo, min_p, inv_t, m,
                  SHIFT: tl.constexpr, POOL: tl.constexpr):  # fmt: skip
    """Attempt ``draw_no``'s candidates (:func:`_entry` ``[SAMPLES]``) from a pool whose regions ``j`` hold
    ``masses`` of what can be drawn (a key ``>= lo``, ``w >= min_p``): for each, the region where the cumulative
    mass passes its goal, then the entry in it (:func:`_pool_scan`), the four regions scanned together."""
    region, local = _pick_splits(masses, _number(seed, stream, row, K1, draw_no))
    counts = tl.sum(tl.where(j[None, :] == region[:, None], listed[None, :], 0), axis=1)
    return _pool_scan(pool_row, region, counts, local, lo, min_p, inv_t, m, SHIFT, POOL)


@triton.jit
def _region_counts(pool_row, j, regions, POOL: tl.constexpr):
    """int32 ``[len(j)]``: the number of entries regions ``j`` of a pool list (0 past ``regions``), stored
    by the row's other programs (read from L2)."""
    at = pool_row + (j // WARPS) * (WARPS + WARPS * POOL) + j % WARPS
    return tl.load(at, mask=j < regions, other=0, cache_modifier=".cg").to(tl.int32)


@triton.jit
def _pool_weights(entry, there, lo, min_p, inv_t, m, SHIFT: tl.constexpr):
    """The float64 weights of pool entries where ``there`` that can be drawn (a key ``>= lo``, ``w >=
    min_p``), 0 elsewhere, and which those are."""
    x = _entry_value(entry)
    w = tl.exp(x * inv_t - m)
    drawable = there & (x >= key_floor(lo, SHIFT)) & (w >= min_p)
    return tl.where(drawable, w, 0.0).to(tl.float64), drawable


@triton.jit
def _pool_masses(pool_row, j, listed, lo, below, n_mass, min_p, inv_t, m, SHIFT: tl.constexpr, POOL: tl.constexpr):
    """``(masses, mass0, mass1, mass2)``: the float64 mass of each region's entries that can be drawn (a key ``>=
    lo``, ``w >= min_p``; ``[len(j)]``), and for the first ``n_mass`` slots ``s`` the mass of the entries with ``w
    >= min_p`` and ``x >= below[s]`` (the floors past an attempt's lower records, :func:`_lower_records`; 0 past
    them), in a sweep of ``[len(j), POOL_TILE / len(j)]`` tiles over every region at once. A late row's pool
    needs no numbers: every entry of its top-k set has fewer than ``top_k`` larger keys (:func:`_weighed`)."""
    R: tl.constexpr = j.shape[0]
    COLUMNS: tl.constexpr = POOL_TILE // R
    entries = pool_row + (j // WARPS)[:, None] * (WARPS + WARPS * POOL) + WARPS + (j % WARPS)[:, None] * POOL
    column = tl.arange(0, COLUMNS)[None, :]
    floor = key_floor(lo, SHIFT)
    b0, b1, b2 = _at(below, 0), _at(below, 1), _at(below, 2)  # once a sweep
    masses = tl.zeros([R], tl.float64)
    mass0 = tl.zeros([R], tl.float64)
    mass1 = tl.zeros([R], tl.float64)
    mass2 = tl.zeros([R], tl.float64)
    for c in range(0, tl.max(listed, axis=0), COLUMNS):
        col = c + column
        entry = tl.load(entries + col, mask=col < listed[:, None], other=0, cache_modifier=".cg")
        x = _entry_value(entry)
        w = tl.exp(x * inv_t - m)
        w64 = tl.where((col < listed[:, None]) & (w >= min_p), w, 0.0).to(tl.float64)
        masses += tl.sum(tl.where(x >= floor, w64, 0.0), axis=1)
        if n_mass > 0:
            mass0 += tl.sum(tl.where(x >= b0, w64, 0.0), axis=1)
        if n_mass > 1:
            mass1 += tl.sum(tl.where(x >= b1, w64, 0.0), axis=1)
        if n_mass > 2:
            mass2 += tl.sum(tl.where(x >= b2, w64, 0.0), axis=1)
    return masses, tl.sum(mass0, axis=0), tl.sum(mass1, axis=0), tl.sum(mass2, axis=0)


@triton.jit
def _pool_check(pool_row, j, listed, cands, lo, total, top_k, top_p, min_p, inv_t, m, SHIFT: tl.constexpr,
                POOL: tl.constexpr):  # fmt: skip
    """``(masses, token, kept)``: the masses of what the next attempt can draw from a pool (:func:`_pool_masses`,
    ``lo`` past ``cands``) and the check of attempt ``cands`` (:func:`_check`) by the masses above its lower
    records and above its largest (the total of ``masses``)."""
    cands = _in_warp(cands)
    role, below, index, n = _lower_records(cands, SHIFT)
    n_mass = tl.where(top_p < 1.0, n, 0)
    masses, mass0, mass1, mass2 = _pool_masses(pool_row, j, listed, lo, below, n_mass, min_p, inv_t, m, SHIFT, POOL)
    slot_mass = _at_candidates(tl.arange(0, SAMPLES), mass0, mass1, mass2, _at(index, 0), _at(index, 1), _at(index, 2))
    none = tl.zeros([SAMPLES], tl.int64)  # numbers above: a late row's top-k always holds
    token, kept = _check(cands, role, slot_mass, none, tl.sum(masses, axis=0), top_k * 0, total, top_k, top_p, min_p,
                         inv_t, m)  # fmt: skip
    return masses, token, kept


@triton.jit
def _pool_scan(pool_row, region, listed, local, lo, min_p, inv_t, m, SHIFT: tl.constexpr, POOL: tl.constexpr):
    """Entries (:func:`_entry`) ``[SAMPLES]``: for each candidate, the entry of pool ``region[c]`` (``listed[c]``
    entries, in vocabulary order) where the cumulative weight of those that can be drawn passes ``local[c]``;
    its last one of positive weight where float sums leave none (:func:`_scan`). A ``[SAMPLES, SUB]`` tile a
    step, a candidate a warp."""
    entries = pool_row + (region // WARPS) * (WARPS + WARPS * POOL) + WARPS + (region % WARPS) * POOL
    hit = tl.full([SAMPLES], -1, tl.int64)
    final = tl.full([SAMPLES], -1, tl.int64)
    before = tl.zeros([SAMPLES], tl.float64)
    for c in range(0, tl.max(listed, axis=0), SUB):
        col = c + tl.arange(0, SUB)[None, :]
        there = col < listed[:, None]
        entry = tl.load(entries[:, None] + col, mask=there, other=0, cache_modifier=".cg")
        w, _ = _pool_weights(entry, there, lo, min_p, inv_t, m, SHIFT)
        passed = (w > 0) & (before[:, None] + tl.cumsum(w, axis=1) > local[:, None])
        first = tl.min(tl.where(passed, entry, 2**62), axis=1)  # entries are in their indices' order
        hit = tl.where((hit < 0) & (first < 2**62), first, hit)
        final = tl.maximum(final, tl.max(tl.where(w > 0, entry, -1), axis=1))
        before += tl.sum(w, axis=1)
    return tl.where(hit >= 0, hit, final)


@triton.jit
def pivot_step(logits_ptr, stride_b, stride_j, temp_ptr, topk_ptr, topp_ptr, minp_ptr, seed_ptr, offset_ptr, lo_ptr,
               y_ptr, total_ptr, part_ptr, count_ptr, pool_ptr, r, row, sp, V, K1, n_splits, SPLIT, BLOCK: tl.constexpr,
               NS_P2: tl.constexpr, NB_P2: tl.constexpr, SHIFT: tl.constexpr, STEPS: tl.constexpr,
               SEPARATE: tl.constexpr, ROUNDS: tl.constexpr, POOL: tl.constexpr, LAUNCHES: tl.constexpr,
               LATE: tl.constexpr, LATE_START: tl.constexpr):  # fmt: skip
    """Step ``q`` of the draws of a row (module docstring), run by program (row, split) of launch ``r`` of the
    ``LAUNCHES`` cut-off rounds while its last draw waits for its check (``lo`` above the lowest key). A row's
    steps are the first :data:`STEPS` launches (``q = r``), or for a late row (:func:`late_pivot_request`)
    the launches from ``LATE_START`` on, ``STEPS`` at most (``q = r - LATE_START``); its step 0 runs after
    the launch's search state (:func:`start_late`), the others here. Steps ``q < SEPARATE`` (none of a
    late row's) take turns: the split's masses above the last draw (even ``q``; with the mass of every entry
    in step 0), then the check and draw ``q // 2 + 1`` (split 0's program, odd ``q``; one less for a row with
    min-p, which has not drawn yet). The later ones do both: the split's masses, then the row's last program
    to store them checks and draws. Without ``LATE`` no row is late."""
    b = row // K1
    lo = tl.load(lo_ptr + row * LO_WORDS)  # the lowest key before a late row's start
    m = tl.load(total_ptr + 2 * row + 1).to(tl.float32)  # a drawing row's (pivot_buffers); loaded beside lo
    t = tl.load(temp_ptr + b).to(tl.float32)
    late = late_pivot_request(t, tl.load(topk_ptr + b).to(tl.int64), tl.load(topp_ptr + b)) & LATE
    if lo > LOWEST:
        q = tl.where(late, r - LATE_START, r)
        steps = tl.where(late, min(STEPS, LAUNCHES - LATE_START), STEPS)
        separate = tl.where(late, 0, SEPARATE)  # a late row has fewer launches left: each does both
        if (q >= late.to(tl.int32)) & (q < steps) & ((q >= separate) | (q % 2 == 0) | (sp == 0)):
            _step(logits_ptr, stride_b, stride_j, topk_ptr, topp_ptr, minp_ptr, seed_ptr, offset_ptr, lo_ptr, y_ptr,
                  total_ptr, part_ptr, count_ptr, pool_ptr, row < 0, row, sp, lo, 1.0 / tl.where(t > 0, t, 1.0), m, q,
                  steps, separate, late, V, K1, n_splits, SPLIT, BLOCK, NS_P2, NB_P2, SHIFT, ROUNDS, POOL,
                  False)  # fmt: skip


@triton.jit
def _step(logits_ptr, stride_b, stride_j, topk_ptr, topp_ptr, minp_ptr, seed_ptr, offset_ptr, lo_ptr, y_ptr, total_ptr,
          part_ptr, count_ptr, pool_ptr, lists, row, sp, lo, inv_t, m, q, steps, separate, late, V, K1, n_splits, SPLIT,
          BLOCK: tl.constexpr, NS_P2: tl.constexpr, NB_P2: tl.constexpr, SHIFT: tl.constexpr, ROUNDS: tl.constexpr,
          POOL: tl.constexpr, START: tl.constexpr):  # fmt: skip
    """Step ``q`` of a row's draws by program (row, split) (:func:`pivot_step`); ``START``: a late row's step 0
    (:func:`start_late`), which weighs its top-k set and draws from it, and where ``lists`` lists it in the
    pool. ``inv_t = 1 / T`` and ``m = max x / T`` are the row's (:func:`_row_facts`)."""
    b = row // K1
    both = q >= separate
    draws = q % 2 == 1  # split 0's program in a launch of draws
    if both | (q % 2 == 0):
        min_p = tl.load(minp_ptr + b).to(tl.float32)
        out = part_ptr + (row * n_splits + sp) * (HEAD + tl.cdiv(SPLIT, SUB))
        base = logits_ptr + b * stride_b + (row % K1) * stride_j
        # step 0 weighs every entry, or a late row's top-k set: lo is its cut then
        start = sp.to(tl.int64) * SPLIT
        pool = pool_ptr + (row * n_splits + sp) * (WARPS + WARPS * POOL)  # a late row's step 0 may list its set
        words = lo_ptr + row * LO_WORDS  # the last attempt's records (_store_pivot)
        c = tl.arange(0, SAMPLES)
        below = tl.load(words + FLOORS + c).to(tl.int32).to(tl.float32, bitcast=True)
        n = tl.load(words + RECORDS).to(tl.int32)
        n_mass, n_count = _weighed(n, tl.load(topk_ptr + b).to(tl.int64), tl.load(topp_ptr + b), late)
        index = tl.load(words + INDICES + c).to(tl.int32)
        _split_mass(base, start, V, lo, below, index, n_mass, n_count, min_p, inv_t, m, SPLIT, BLOCK, SHIFT, out,
                    q == 0, pool, lists, POOL, START)  # fmt: skip
        draws = q < 0
        if both:
            tl.debug_barrier()  # every thread's stores are issued before the count says so
            draws = tl.atomic_add(count_ptr + row, 1, sem="acq_rel", scope="gpu") == n_splits - 1
    if draws:
        if both:
            tl.store(count_ptr + row, 0)  # the row's programs of this launch have all counted
        d = tl.where(both, separate // 2 + 1 + q - separate, q // 2 + 1)  # the draw this launch makes
        _draw_step(logits_ptr, stride_b, stride_j, topk_ptr, topp_ptr, minp_ptr, seed_ptr, offset_ptr, lo_ptr,
                   y_ptr, total_ptr, part_ptr, pool_ptr, lists, d, q == steps - 1, late, row, inv_t, m, V, K1,
                   n_splits, SPLIT, BLOCK, NS_P2, NB_P2, SHIFT, ROUNDS, POOL, START)  # fmt: skip


@triton.jit
def start_late(logits_ptr, stride_b, stride_j, temp_ptr, topk_ptr, topp_ptr, minp_ptr, seed_ptr, offset_ptr,
               gkey_ptr, zmax_ptr, lo_ptr, y_ptr, total_ptr, part_ptr, count_ptr, pool_ptr, row, sp, cut, listed_before,
               V, K1, n_splits, SPLIT, BLOCK: tl.constexpr, NS_P2: tl.constexpr, NB_P2: tl.constexpr,
               SHIFT: tl.constexpr, STEPS: tl.constexpr, ROUNDS: tl.constexpr, POOL: tl.constexpr,
               LAUNCHES: tl.constexpr, LATE_START: tl.constexpr):  # fmt: skip
    """A late row's start, by its programs of launch ``LATE_START`` of the ``LAUNCHES`` rounds once its search
    state holds its top-k ``cut``. With a ``POOL``, a row whose pool lists every entry at or above the cut (the
    launch before listed them, :func:`list_late_split`) draws to the end there, by split 0's program alone
    (:func:`_pool_start`). Another one with regular logits starts its draws there (``lo = cut``, ``y = -3``:
    not drawn yet) and makes step 0: split 0's program stores them before it counts, so the row's last
    program draws from there. A row with irregular logits takes its argmax. Other rows are left alone."""
    b = row // K1
    if late_pivot_request(tl.load(temp_ptr + b), tl.load(topk_ptr + b).to(tl.int64), tl.load(topp_ptr + b)):
        _, active, inv_t, m = _row_facts(row, K1, n_splits, temp_ptr, topk_ptr, topp_ptr, gkey_ptr, zmax_ptr, NS_P2)
        pooled = row < 0
        if POOL > 0:
            pool_row = pool_ptr + row * n_splits * (WARPS + WARPS * POOL)
            j = tl.arange(0, NS_P2 * WARPS)
            listed = _region_counts(pool_row, j, n_splits * WARPS, POOL)
            pooled = active & listed_before & (tl.max(listed, axis=0) <= POOL)  # its pool holds the top-k set
            if pooled & (sp == 0):
                token, kept = _pool_start(pool_row, j, listed, cut, b, row, K1, topk_ptr, topp_ptr, minp_ptr, seed_ptr,
                                          offset_ptr, inv_t, m, SHIFT, POOL, ROUNDS)  # fmt: skip
                tl.store(y_ptr + row, tl.where(kept, token, ARGMAX))
                tl.store(lo_ptr + row * LO_WORDS, row * 0 + LOWEST)
        if ~pooled:
            lo = tl.where(active, cut, LOWEST)
            if sp == 0:
                tl.store(y_ptr + row, tl.where(active, UNDRAWN, ARGMAX))
                tl.store(lo_ptr + row * LO_WORDS, lo)
                tl.store(total_ptr + 2 * row + 1, m)  # for its steps in the launches after this one
            if active:
                _step(logits_ptr, stride_b, stride_j, topk_ptr, topp_ptr, minp_ptr, seed_ptr, offset_ptr, lo_ptr, y_ptr,
                      total_ptr, part_ptr, count_ptr, pool_ptr, ~listed_before, row, sp, lo, inv_t, m, row * 0,
                      min(STEPS, LAUNCHES - LATE_START), 0, row >= 0, V, K1, n_splits, SPLIT, BLOCK, NS_P2, NB_P2,
                      SHIFT, ROUNDS, POOL, True)  # fmt: skip


@triton.jit
def _pool_start(pool_row, j, listed, cut, b, row, K1, topk_ptr, topp_ptr, minp_ptr, seed_ptr, offset_ptr, inv_t, m,
                SHIFT: tl.constexpr, POOL: tl.constexpr, ROUNDS: tl.constexpr):  # fmt: skip
    """``(token, kept)``: a late row's attempts, all of them, from its pool (regions ``j``, ``listed`` entries
    each, every entry with a key ``>= cut`` among them): the top-k set's mass (the total the checks compare
    with), the first attempt from it as a pass over the row would make it (:func:`_pool_attempt`), then
    :func:`_pool_draws`."""
    min_p = tl.load(minp_ptr + b).to(tl.float32)
    top_k = tl.load(topk_ptr + b).to(tl.int64)
    top_p = tl.load(topp_ptr + b)
    seed, stream = _stream(seed_ptr, offset_ptr, row, K1)
    none = tl.full([SAMPLES], float("inf"), tl.float32)  # no candidates to weigh above
    every, _, _, _ = _pool_masses(pool_row, j, listed, cut, none, 0, 0.0, inv_t, m, SHIFT, POOL)
    masses = every
    if min_p > 0:  # what can be drawn is the set's entries of weight >= min_p
        masses, _, _, _ = _pool_masses(pool_row, j, listed, cut, none, 0, min_p, inv_t, m, SHIFT, POOL)
    cands = _pool_attempt(pool_row, j, listed, masses, seed, stream, row, K1, 0, cut, min_p, inv_t, m, SHIFT, POOL)
    return _pool_draws(pool_row, j, listed, cands, _past(cands, SHIFT), row * 0 + 1, tl.sum(every, axis=0), top_k,
                       top_p, min_p, inv_t, m, seed, stream, row, K1, SHIFT, POOL, ROUNDS)  # fmt: skip


def pivot_buffers(rows: int, n_splits: int, split: int, device, late: bool = True) -> tuple[torch.Tensor, ...]:
    """The draws' workspace ``(lo, y, total, part, count, peak, pool)`` for ``n_splits`` splits of ``split`` entries
    a row: ``lo [rows, LO_WORDS]`` int64 holds a drawing row's pivot (the lowest key it draws from), its last
    attempt's candidates (:func:`_entry`) and their records; ``part [rows, n_splits, HEAD + sub-blocks]`` float64
    each split's sums (:data:`HEAD`: the masses of what can be drawn and of every entry, the number of what can be
    drawn, the mass and number above each lower record, a word a warp), then its sub-blocks' masses (``SUB`` entries
    each); ``peak [rows, n_splits, sub-blocks]`` float32 the sub-blocks' largest ``x / T`` (the first attempt's);
    ``count [2, rows]`` int32, zeroed here, counts a launch's programs of a row that have stored them (the last one
    sets it back to 0): their stats or masses (``count[0]``: the stats launch, the draws), their bucket sums in a
    search's rounds (``count[1]``, :func:`._sampling_filter.narrowed_state`); ``y [rows]`` int64 holds the draws
    once the cut-off rounds have run (token, ``-1``: the row's argmax, ``-2``: not a pivot request); ``total [rows,
    2]`` float64 a drawing row's total (the mass its checks compare with) and its ``m = max x / T``, stored where
    its draws start (the stats launch, a late row's start) so that its steps need not gather it; ``pool [rows,
    n_splits, WARPS + WARPS * pool_entries(n_splits)]`` int64 lists a late row's entries at or above its top-k
    search's last interval (:func:`list_late_split`; none without ``late``, the promise of no late request)."""
    n_sub = triton.cdiv(split, SUB.value)
    lo = torch.empty((rows, LO_WORDS.value), dtype=torch.int64, device=device)
    y = torch.empty(rows, dtype=torch.int64, device=device)
    total = torch.empty((rows, 2), dtype=torch.float64, device=device)
    part = torch.empty((rows, n_splits, HEAD.value + n_sub), dtype=torch.float64, device=device)
    count = torch.zeros((2, rows), dtype=torch.int32, device=device)
    peak = torch.empty((rows, n_splits, n_sub), dtype=torch.float32, device=device)
    warps = WARPS.value
    entries = pool_entries(n_splits) if late else 0
    pool = torch.empty((rows, n_splits, warps + warps * entries), dtype=torch.int64, device=device)
    return lo, y, total, part, count, peak, pool


def pool_entries(n_splits: int) -> int:
    """The entries a region of the pool holds for rows of ``n_splits`` splits: :data:`POOL`, or 0 (no pool)
    above :data:`POOL_SPLITS` splits."""
    return POOL if n_splits <= POOL_SPLITS else 0


def late_start(key_bits: int) -> int:
    """The launch of the rounds where a late row's top-k cut is known, for keys of ``key_bits`` bits: the
    search's top-k phase ends there (half its rounds, less the count the stats launch made)."""
    return num_rounds(key_bits) // 2 - 1


def late_list(key_bits: int) -> int:
    """The launch of the rounds where a late row makes the last count of its top-k search, over an interval
    of 16 keys, and lists every entry at or above it (:func:`list_late_split`): the one before
    :func:`late_start`."""
    return late_start(key_bits) - 1


def pivot_launches(key_bits: int, late: bool) -> int:
    """The launches of the rounds of a batch of pivot requests, for keys of ``key_bits`` bits (16 for
    bfloat16, else 32): the draws' :data:`DRAW_LAUNCHES`, and with ``late`` (:func:`.chain_verify_sampling`'s)
    up to the end of a late row's :data:`LATE_STEPS` if that is later (:func:`late_start` on, :data:`STEPS`
    at most). Never more than the search's rounds."""
    launches = max(DRAW_LAUNCHES, late_start(key_bits) + min(STEPS, LATE_STEPS)) if late else DRAW_LAUNCHES
    return min(launches, num_rounds(key_bits))


def pivot_options(draws: bool, n_splits: int, late: bool, key_bits: int) -> dict:
    """The round kernel's settings of the draws and, when it makes them (``draws``), its registers a thread,
    as this module holds them now (tests and probes change them): :data:`STEPS` (at most the launches,
    :func:`pivot_launches`), :data:`SEPARATE`, the bound on draws (:data:`.chain_sampling_ref.PIVOT_ROUNDS`,
    one at least), the launch where late rows start (:func:`late_start`), the pool's regions for rows of
    ``n_splits`` splits (:func:`pool_entries`, as :func:`pivot_buffers` sizes them; none without ``late``) and
    :data:`REGISTERS`."""
    steps = min(STEPS, pivot_launches(key_bits, late))
    assert 2 <= SEPARATE <= steps and SEPARATE % 2 == 0, "launch 0 stores masses alone; the turns end in pairs"
    assert PIVOT_ROUNDS >= 1, "a row makes its first draw at least"
    return {"PIVOT_STEPS": steps, "PIVOT_SEPARATE": SEPARATE, "PIVOT_ROUNDS": PIVOT_ROUNDS,
            "PIVOT_POOL": pool_entries(n_splits) if draws and late else 0, "LATE_START": late_start(key_bits),
            "maxnreg": REGISTERS if draws else None}  # fmt: skip
