"""A draw from the top-p distribution of every pivot row (:func:`.chain_sampling_ref.pivot_draws`), without
the cut-off: rejection by a rising pivot.

Top-p keeps an upper set of keys, so a draw from the weights of the keys ``>= lo`` that lands in the kept
set is a draw from it; one that does not proves every key up to its own outside, and the next draw starts
past it. A draw is checked by the float64 mass of strictly larger keys against ``top_p`` times the total.
About nine rows in ten keep their first draw. Min-p keeps an upper set too, and it is known from the
start: with it, only the entries of weight ``>= min_p`` are drawn from, from the first draw on (the total
stays that of every entry).

The draws launch nothing of their own: they run inside the first :data:`STEPS` launches of the cut-off
rounds (:func:`pivot_step`, over (row, vocabulary split)), whose programs for pivot rows have no round
work. A draw needs masses: each program of a row still drawing stores the float64 mass of its split's
entries that can be drawn, and of each of its sub-blocks of ``SUB`` entries (the first time over every key,
beside the total). A draw checks the row's last draw by them (the mass above it) and, if the check fails,
makes the next by inverse CDF: the split from the split masses, the sub-block from its sub-block masses,
the entry from a scan of it (:func:`_draw_step`).

The first :data:`SEPARATE` launches take turns: masses, then draws (split 0's programs). In the later ones
few rows still draw, and a launch does both: the row's last program to store its masses (an atomic count)
draws. Doing both is slower while most rows draw, as a row's draw waits for its last program under the
others' loads. A row still drawing after the last launch goes on alone there, a pass over the row per
draw, up to :data:`.chain_sampling_ref.PIVOT_ROUNDS` draws.

Rows of other requests, and the greedy or degenerate rows of pivot requests, take no part: ``y`` holds
the token, ``-1`` (the row's argmax) or ``-2`` (not a pivot request).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._argmax import sortable_key
from ._sampling_filter import INF_KEY_C, NEG_INF_KEY_C, pivot_request
from .chain_sampling_ref import PIVOT_ROUNDS

NOT_PIVOT: tl.constexpr = tl.constexpr(-2)
ARGMAX: tl.constexpr = tl.constexpr(-1)
LOWEST: tl.constexpr = tl.constexpr(-(2**62))  # below every key
#: Entries a sub-block: a warp's share of a ``BLOCK`` (four warps), summed without crossing warps.
SUB: tl.constexpr = tl.constexpr(256)
#: Launches of the cut-off rounds the draws run in (a bfloat16 row has eight).
STEPS = 8
#: Of them, the first ones that take turns: masses in one, the draw by them in the next (:func:`pivot_step`).
SEPARATE = 4
#: Registers a thread of the round kernel that makes the draws (its ``maxnreg``). The compiler takes 128, and
#: four programs share an SM: at B = 8 (544 programs) a launch of masses then runs in two waves, not one.
REGISTERS = 96


@triton.jit
def _row_facts(row, K1, n_splits, temp_ptr, topk_ptr, topp_ptr, gkey_ptr, zmax_ptr, NS_P2: tl.constexpr):
    """``(pivot request, row takes part, inv_t, m)``: a row takes part when its request is a pivot request and
    its logits are regular (no NaN or +inf, not all -inf) and ``max x / T`` is finite."""
    b = row // K1
    sp = tl.arange(0, NS_P2)
    t = tl.load(temp_ptr + b).to(tl.float32)
    pivot = pivot_request(t, tl.load(topk_ptr + b).to(tl.int64), tl.load(topp_ptr + b))
    gk = tl.max(tl.load(gkey_ptr + row * n_splits + sp, mask=sp < n_splits, other=-2147483648), axis=0)
    m = tl.max(tl.load(zmax_ptr + row * n_splits + sp, mask=sp < n_splits, other=float("-inf")), axis=0)
    finite = (m.to(tl.int32, bitcast=True) & 0x7F800000) != 0x7F800000
    active = pivot & (gk < INF_KEY_C) & (gk != NEG_INF_KEY_C) & finite
    return pivot, active, 1.0 / tl.where(t > 0, t, 1.0), m


@triton.jit
def _split_mass(base, start, V, lo, min_p, inv_t, m, SPLIT, BLOCK: tl.constexpr, SHIFT: tl.constexpr, out, whole):
    """The float64 mass ``w = exp(x / T - m)`` of the entries of ``[start, start + SPLIT) ∩ [0, V)`` that can
    be drawn, those with a key ``>= lo`` and ``w >= min_p``, stored at ``out[0]``, and that of each of its
    sub-blocks of ``SUB`` entries at ``out[2 + i]``; with ``whole``, the mass of all its entries at
    ``out[1]``. Returns the first."""
    if whole:  # two loops: a branch inside one would keep its loads from being pipelined
        total, every = _mass_loop(base, start, V, lo, min_p, inv_t, m, SPLIT, BLOCK, SHIFT, out, True)
        tl.store(out + 1, every)
    else:
        total, every = _mass_loop(base, start, V, lo, min_p, inv_t, m, SPLIT, BLOCK, SHIFT, out, False)
    tl.store(out, total)
    return total


@triton.jit
def _mass_loop(base, start, V, lo, min_p, inv_t, m, SPLIT, BLOCK: tl.constexpr, SHIFT: tl.constexpr, out,
               WHOLE: tl.constexpr):  # fmt: skip
    """:func:`_split_mass`'s pass: stores the sub-blocks' masses and returns the split's, and that of all its
    entries with ``WHOLE`` (else 0). A tile ``[BLOCK / SUB, SUB]`` holds a sub-block a warp: its sums need no
    exchange between warps."""
    N_SUB: tl.constexpr = BLOCK // SUB
    lo32 = tl.minimum(tl.maximum(lo, -2147483648), 2147483647).to(tl.int32)  # keys >> SHIFT are int32
    sub = tl.arange(0, N_SUB)
    per_warp = tl.zeros([N_SUB], tl.float64)
    every = tl.zeros([N_SUB], tl.float64)
    for i in range(0, SPLIT, BLOCK):
        offs = start + i + sub[:, None] * SUB + tl.arange(0, SUB)[None, :]
        inb = offs < V
        x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
        w = tl.exp(x * inv_t - m)
        live = inb & ((sortable_key(x) >> SHIFT) >= lo32) & (w >= min_p)
        sums = tl.sum(tl.where(live, w, 0.0).to(tl.float64), axis=1)
        tl.store(out + 2 + i // SUB + sub, sums)
        per_warp += sums
        if WHOLE:
            every += tl.sum(tl.where(inb, w, 0.0).to(tl.float64), axis=1)
    return tl.sum(per_warp, axis=0), tl.sum(every, axis=0)


@triton.jit
def _pick(mass, goal, N_P2: tl.constexpr):
    """``(index, goal left in it)``: the entry of ``mass [N_P2]`` (float64, >= 0) where the cumulative mass
    passes ``goal``, or the last one of positive mass if float sums leave none."""
    i = tl.arange(0, N_P2)
    last = tl.max(tl.where(mass > 0, i, 0), axis=0)
    chosen = tl.minimum(tl.min(tl.where(tl.cumsum(mass, axis=0) > goal, i, N_P2), axis=0), last)
    return chosen, goal - tl.sum(tl.where(i < chosen, mass, 0.0), axis=0)


@triton.jit
def _draw(base, V, part, n_splits, u, lo, min_p, inv_t, m, SPLIT, NS_P2: tl.constexpr, NB_P2: tl.constexpr,
          SHIFT: tl.constexpr):  # fmt: skip
    """The entry that number ``u`` picks by inverse CDF among those that can be drawn (a key ``>= lo`` and
    ``w >= min_p``), given ``part`` (the row's ``[n_splits, 2 + sub-blocks]`` float64 masses of
    :func:`_split_mass`): the split where the cumulative mass passes ``u`` times the total, the sub-block in
    it, then the entry in the sub-block (the last one of positive weight wherever float sums leave none).
    One sub-block is read, whatever the split's size."""
    per_split = 2 + tl.cdiv(SPLIT, SUB)
    sp = tl.arange(0, NS_P2)
    split_mass = tl.load(part + sp * per_split, mask=sp < n_splits, other=0.0, cache_modifier=".cg")
    chosen, local = _pick(split_mass, u.to(tl.float64) * tl.sum(split_mass, axis=0), NS_P2)
    bi = tl.arange(0, NB_P2)
    block_mass = tl.load(
        part + chosen * per_split + 2 + bi, mask=bi < per_split - 2, other=0.0, cache_modifier=".cg"
    )  # stored by other programs (L2)
    block, local = _pick(block_mass, local, NB_P2)
    offs = chosen.to(tl.int64) * SPLIT + block * SUB + tl.arange(0, SUB)
    inb = offs < V
    x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
    w = tl.exp(x * inv_t - m)
    w = tl.where(inb & ((sortable_key(x) >> SHIFT).to(tl.int64) >= lo) & (w >= min_p), w, 0.0).to(tl.float64)
    hit = tl.min(tl.where((w > 0) & (tl.cumsum(w, axis=0) > local), offs, V), axis=0)
    return tl.where(hit < V, hit, tl.max(tl.where(w > 0, offs, -1), axis=0))


@triton.jit
def _kept(base, token, mass_above, total, top_p, min_p, inv_t, m):
    """Whether the drawn ``token`` is in the kept set: the mass of strictly larger keys ``< top_p *`` the
    total, and its weight ``>= min_p``."""
    w = tl.exp(tl.load(base + token).to(tl.float32) * inv_t - m)
    return (mass_above < top_p.to(tl.float64) * total) & ((w >= min_p) | (min_p <= 0))


@triton.jit
def _draw_step(logits_ptr, stride_b, stride_j, topp_ptr, minp_ptr, seed_ptr, offset_ptr, lo_ptr, y_ptr, total_ptr,
               part_ptr, d, last, row, inv_t, m, V, K1, n_splits, SPLIT, BLOCK: tl.constexpr, NS_P2: tl.constexpr,
               NB_P2: tl.constexpr, SHIFT: tl.constexpr, ROUNDS: tl.constexpr):  # fmt: skip
    """Draw ``d`` of a row by the masses just stored. ``d == 0``: the row's first draw. Else the check of
    draw ``d - 1`` (the masses are those above it), then, if it failed, draw ``d``; in the ``last`` launch
    then on alone, a pass over the row and a check, then a draw, at a time. Past ``ROUNDS`` draws the row
    takes its argmax. A row done (its draw kept, or its argmax) sets ``lo`` to the lowest key, which the
    launches after it skip."""
    b = row // K1
    sp = tl.arange(0, NS_P2)
    base = logits_ptr + b * stride_b + (row % K1) * stride_j
    top_p = tl.load(topp_ptr + b)
    min_p = tl.load(minp_ptr + b).to(tl.float32)
    per_split = 2 + tl.cdiv(SPLIT, SUB)
    part = part_ptr + row * n_splits * per_split
    mass = tl.sum(tl.load(part + sp * per_split, mask=sp < n_splits, other=0.0, cache_modifier=".cg"), axis=0)
    stream = (tl.load(offset_ptr + b) * (K1 + 1) + K1) << 32  # verify_stream
    seed = tl.load(seed_ptr + b)
    if d == 0:  # with min-p the first masses leave out what it cuts: the total of every entry beside them
        total = mass
        if min_p > 0:
            total = tl.sum(tl.load(part + sp * per_split + 1, mask=sp < n_splits, other=0.0, cache_modifier=".cg"),
                           axis=0)  # fmt: skip
        tl.store(total_ptr + row, total)
        kept = total < 0.0  # nothing drawn yet
        lo = LOWEST + 0 * row
        token = ARGMAX + 0 * row
    else:
        total = tl.load(total_ptr + row)
        token = tl.load(y_ptr + row)
        kept = _kept(base, token, mass, total, top_p, min_p, inv_t, m)
        lo = tl.load(lo_ptr + row)
    draw_no = d + 0 * row
    drawing = ~kept & (draw_no < ROUNDS)
    pending = drawing & ~last  # a draw that the next launch checks
    while drawing:
        counter = K1 + 1 + draw_no * K1 + row % K1  # pivot_counter
        token = _draw(base, V, part, n_splits, tl.rand(seed, stream | counter), lo, min_p, inv_t, m, SPLIT, NS_P2,
                      NB_P2, SHIFT)  # fmt: skip
        lo = (sortable_key(tl.load(base + token).to(tl.float32)) >> SHIFT).to(tl.int64) + 1
        draw_no += 1
        if last:  # its check, here: the masses above it, split by split, which the next draw reads
            tl.debug_barrier()  # every thread has read the masses of the last draw
            mass = tl.zeros([], tl.float64)
            for s in range(0, n_splits):
                mass += _split_mass(base, s * SPLIT, V, lo, min_p, inv_t, m, SPLIT, BLOCK, SHIFT, part + s * per_split,
                                    False)  # fmt: skip
            tl.debug_barrier()  # and they see the new ones
            kept = _kept(base, token, mass, total, top_p, min_p, inv_t, m)
            drawing = ~kept & (draw_no < ROUNDS)
        else:
            drawing = draw_no < 0
    tl.store(y_ptr + row, tl.where(kept | pending, token, ARGMAX))
    tl.store(lo_ptr + row, tl.where(pending, lo, LOWEST))


@triton.jit
def pivot_step(logits_ptr, stride_b, stride_j, temp_ptr, topk_ptr, topp_ptr, minp_ptr, seed_ptr, offset_ptr,
               gkey_ptr, zmax_ptr, lo_ptr, y_ptr, total_ptr, part_ptr, count_ptr, r, row, sp, V, K1, n_splits, SPLIT,
               BLOCK: tl.constexpr, NS_P2: tl.constexpr, NB_P2: tl.constexpr, SHIFT: tl.constexpr,
               STEPS: tl.constexpr, SEPARATE: tl.constexpr, ROUNDS: tl.constexpr):  # fmt: skip
    """Step ``r`` of the draws (module docstring), run by program (row, split) of launch ``r`` of the cut-off
    rounds; nothing for ``r >= STEPS``. Launches ``r < SEPARATE`` take turns: the split's masses (even
    ``r``), then draw ``r // 2`` (split 0's program, odd ``r``). The later ones do both: the split's masses,
    then the row's last program to store them makes the next draw. The first masses are over every key,
    with the mass of all entries too."""
    both = r >= SEPARATE
    if (r < STEPS) & (both | (r % 2 == 0) | (sp == 0)):  # a launch of draws needs split 0's programs alone
        pivot, active, inv_t, m = _row_facts(row, K1, n_splits, temp_ptr, topk_ptr, topp_ptr, gkey_ptr, zmax_ptr,
                                             NS_P2)  # fmt: skip
        if (r == 0) & (sp == 0):
            tl.store(count_ptr + row, 0)  # launch 0 counts nothing (SEPARATE >= 2)
            if ~active:
                tl.store(y_ptr + row, tl.where(pivot, ARGMAX, NOT_PIVOT).to(tl.int64))
                tl.store(lo_ptr + row, LOWEST)
        draws = r < 0  # whether this program makes the row's draw
        if both | (r % 2 == 0):
            lo = tl.where(r == 0, LOWEST, tl.load(lo_ptr + row))  # a row done has lo at LOWEST
            if active & ((r == 0) | (lo > LOWEST)):
                b = row // K1
                min_p = tl.load(minp_ptr + b).to(tl.float32)
                out = part_ptr + (row * n_splits + sp) * (2 + tl.cdiv(SPLIT, SUB))
                _split_mass(logits_ptr + b * stride_b + (row % K1) * stride_j, sp.to(tl.int64) * SPLIT, V, lo, min_p,
                            inv_t, m, SPLIT, BLOCK, SHIFT, out, (r == 0) & (min_p > 0))  # fmt: skip
                if both:
                    tl.debug_barrier()  # every thread's stores are issued before the count says so
                    draws = tl.atomic_add(count_ptr + row, 1, sem="acq_rel", scope="gpu") == n_splits - 1
        else:  # split 0's program in a launch of draws
            draws = active & ((r == 1) | (tl.load(lo_ptr + row) > LOWEST))
        if draws:
            if both:
                tl.store(count_ptr + row, 0)  # the row's programs of this launch have all counted
            d = tl.where(both, SEPARATE // 2 + r - SEPARATE, r // 2)  # the draw this launch makes
            _draw_step(logits_ptr, stride_b, stride_j, topp_ptr, minp_ptr, seed_ptr, offset_ptr, lo_ptr, y_ptr,
                       total_ptr, part_ptr, d, r == STEPS - 1, row, inv_t, m, V, K1, n_splits, SPLIT, BLOCK, NS_P2,
                       NB_P2, SHIFT, ROUNDS)  # fmt: skip


def pivot_buffers(rows: int, n_splits: int, split: int, device) -> tuple[torch.Tensor, ...]:
    """The draws' workspace ``(lo, y, total, part, count)`` for ``n_splits`` splits of ``split`` entries a
    row: ``part [rows, n_splits, 2 + sub-blocks]`` float64 holds the masses of each split (of what can be
    drawn, and of every entry) and of its sub-blocks of ``SUB`` entries; ``count [rows]`` int32 counts a
    launch's programs of a row that have stored them (launch 0 sets it to 0); ``y [rows]`` int64 holds the
    draws once the cut-off rounds have run (token, ``-1``: the row's argmax, ``-2``: not a pivot request)."""
    lo = torch.empty(rows, dtype=torch.int64, device=device)
    y = torch.empty(rows, dtype=torch.int64, device=device)
    total = torch.empty(rows, dtype=torch.float64, device=device)
    part = torch.empty((rows, n_splits, 2 + triton.cdiv(split, SUB.value)), dtype=torch.float64, device=device)
    count = torch.empty(rows, dtype=torch.int32, device=device)
    return lo, y, total, part, count


def pivot_options(draws: bool) -> dict:
    """The round kernel's settings of the draws and, when it makes them (``draws``), its registers a thread,
    as this module holds them now (tests and probes change them): :data:`STEPS`, :data:`SEPARATE`, the
    bound on draws (:data:`.chain_sampling_ref.PIVOT_ROUNDS`) and :data:`REGISTERS`."""
    assert 2 <= SEPARATE <= STEPS and SEPARATE % 2 == 0, "launch 0 stores masses alone; the turns end in pairs"
    return {"PIVOT_STEPS": STEPS, "PIVOT_SEPARATE": SEPARATE, "PIVOT_ROUNDS": PIVOT_ROUNDS,
            "maxnreg": REGISTERS if draws else None}  # fmt: skip
