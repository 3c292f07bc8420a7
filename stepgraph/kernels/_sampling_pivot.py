"""A draw from the top-p distribution of every pivot row (:func:`.chain_sampling_ref.pivot_draws`), without
the cut-off: rejection by a rising pivot.

Top-p keeps an upper set of keys, so a draw from the weights of the keys ``>= lo`` that lands in the kept
set is a draw from it; one that does not proves every key up to its own outside, and the next draw starts
past it. A draw is checked by the float64 mass of strictly larger keys against ``top_p`` times the total.
About nine rows in ten keep their first draw.

The draws launch nothing of their own: their six steps run inside the first six launches of the cut-off
rounds (:func:`pivot_step`, over (row, vocabulary split)), whose programs for pivot rows have no round
work. Step ``r`` of launch ``r``:

* ``r = 0, 2, 4``, ``mass``: the float64 mass of the split's keys ``>= lo``, and of each of its blocks
  (first the whole row: the total);
* ``r = 1, 3``, ``draw`` (split 0's program): keeps the last draw, or draws (again), by inverse CDF: the
  split from the split masses, the block from its block masses, the entry from a scan of that block;
* ``r = 5``, the last ``draw``: keeps the draw, or goes on alone, a pass over the row per draw, up to
  :data:`.chain_sampling_ref.PIVOT_ROUNDS` draws.

Rows of other requests, and the greedy or degenerate rows of pivot requests, take no part: ``y`` holds
the token, ``-1`` (the row's argmax) or ``-2`` (not a pivot request).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._argmax import sortable_key
from ._sampling_filter import BLOCK, INF_KEY_C, NEG_INF_KEY_C, pivot_request
from .chain_sampling_ref import PIVOT_ROUNDS

NOT_PIVOT: tl.constexpr = tl.constexpr(-2)
ARGMAX: tl.constexpr = tl.constexpr(-1)
LOWEST: tl.constexpr = tl.constexpr(-(2**62))  # below every key
LAST_DRAW: tl.constexpr = tl.constexpr(2)  # draws 0 and 1 in steps of their own, then the rest in one
#: Launches of the cut-off rounds the draws take a step in.
STEPS = 2 * (LAST_DRAW.value + 1)


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
def _split_mass(base, start, V, lo, inv_t, m, SPLIT, BLOCK: tl.constexpr, SHIFT: tl.constexpr, out):
    """The float64 mass ``exp(x / T - m)`` of the keys ``>= lo`` in ``[start, start + SPLIT) ∩ [0, V)``,
    stored at ``out[0]``, and that of each of its blocks of ``BLOCK`` entries at ``out[1 + i]``."""
    total = tl.zeros([], tl.float64)
    for i in range(0, SPLIT, BLOCK):
        offs = start + i + tl.arange(0, BLOCK)
        inb = offs < V
        x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
        live = inb & ((sortable_key(x) >> SHIFT).to(tl.int64) >= lo)
        block = tl.sum(tl.where(live, tl.exp(x * inv_t - m), 0.0).to(tl.float64), axis=0)
        tl.store(out + 1 + i // BLOCK, block)
        total += block
    tl.store(out, total)
    return total


@triton.jit
def _pick(mass, goal, N_P2: tl.constexpr):
    """``(index, goal left in it)``: the entry of ``mass [N_P2]`` (float64, >= 0) where the cumulative mass
    passes ``goal``, or the last one of positive mass if float sums leave none."""
    i = tl.arange(0, N_P2)
    last = tl.max(tl.where(mass > 0, i, 0), axis=0)
    chosen = tl.minimum(tl.min(tl.where(tl.cumsum(mass, axis=0) > goal, i, N_P2), axis=0), last)
    return chosen, goal - tl.sum(tl.where(i < chosen, mass, 0.0), axis=0)


@triton.jit
def _draw(base, V, part, n_splits, u, lo, inv_t, m, SPLIT, BLOCK: tl.constexpr, NS_P2: tl.constexpr,
          NB_P2: tl.constexpr, SHIFT: tl.constexpr):  # fmt: skip
    """The entry that number ``u`` picks among the keys ``>= lo`` by inverse CDF, given ``part`` (the row's
    ``[n_splits, 1 + blocks]`` float64 masses of :func:`_split_mass`): the split where the cumulative mass
    passes ``u`` times the total, the block in it, then the entry in the block (the last one of positive
    weight wherever float sums leave none). One block is read, whatever the split's size."""
    nb = tl.cdiv(SPLIT, BLOCK)
    sp = tl.arange(0, NS_P2)
    split_mass = tl.load(part + sp * (1 + nb), mask=sp < n_splits, other=0.0)
    chosen, local = _pick(split_mass, u.to(tl.float64) * tl.sum(split_mass, axis=0), NS_P2)
    bi = tl.arange(0, NB_P2)
    block_mass = tl.load(part + chosen * (1 + nb) + 1 + bi, mask=bi < nb, other=0.0)
    block, local = _pick(block_mass, local, NB_P2)
    offs = chosen.to(tl.int64) * SPLIT + block * BLOCK + tl.arange(0, BLOCK)
    inb = offs < V
    x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
    w = tl.where(inb & ((sortable_key(x) >> SHIFT).to(tl.int64) >= lo), tl.exp(x * inv_t - m), 0.0)
    w = w.to(tl.float64)
    hit = tl.min(tl.where((w > 0) & (tl.cumsum(w, axis=0) > local), offs, V), axis=0)
    return tl.where(hit < V, hit, tl.max(tl.where(w > 0, offs, -1), axis=0))


@triton.jit
def _kept(base, token, mass_above, total, top_p, min_p, inv_t, m):
    """Whether the drawn ``token`` is in the kept set: the mass of strictly larger keys ``< top_p *`` the
    total, and its weight ``>= min_p``."""
    w = tl.exp(tl.load(base + token).to(tl.float32) * inv_t - m)
    return (mass_above < top_p.to(tl.float64) * total) & ((w >= min_p) | (min_p <= 0))


@triton.jit
def _mass_step(logits_ptr, stride_b, stride_j, temp_ptr, topk_ptr, topp_ptr, gkey_ptr, zmax_ptr, lo_ptr, part_ptr,
               r, row, sp, V, K1, n_splits, SPLIT, BLOCK: tl.constexpr, NS_P2: tl.constexpr,
               SHIFT: tl.constexpr):  # fmt: skip
    """Program (row, split) of a row still drawing: the mass of the split's keys ``>= lo``, and of each of its
    blocks (before draw ``r == 0``: all of them, the total)."""
    _, active, inv_t, m = _row_facts(row, K1, n_splits, temp_ptr, topk_ptr, topp_ptr, gkey_ptr, zmax_ptr, NS_P2)
    lo = tl.where(r == 0, LOWEST, tl.load(lo_ptr + row))
    if active & ((r == 0) | (lo > LOWEST)):  # a row that kept its draw has lo back at LOWEST
        base = logits_ptr + (row // K1) * stride_b + (row % K1) * stride_j
        out = part_ptr + (row * n_splits + sp) * (1 + tl.cdiv(SPLIT, BLOCK))
        _split_mass(base, sp.to(tl.int64) * SPLIT, V, lo, inv_t, m, SPLIT, BLOCK, SHIFT, out)


@triton.jit
def _draw_step(logits_ptr, stride_b, stride_j, temp_ptr, topk_ptr, topp_ptr, minp_ptr, seed_ptr, offset_ptr,
               gkey_ptr, zmax_ptr, lo_ptr, y_ptr, total_ptr, part_ptr, r, row, V, K1, n_splits, SPLIT,
               BLOCK: tl.constexpr, NS_P2: tl.constexpr, NB_P2: tl.constexpr, SHIFT: tl.constexpr,
               ROUNDS: tl.constexpr):  # fmt: skip
    """One program per row. ``r == 0``: the row's first draw. Else the check of draw ``r - 1`` (the split
    masses hold the mass above it), then, if it failed, draw ``r``; in the last step (``r == LAST_DRAW``)
    then on alone, a check and a draw at a time, up to ``ROUNDS`` draws; past them the row's argmax. A
    row that keeps its draw sets ``lo`` to the lowest key, which the passes after it skip."""
    last = r == LAST_DRAW
    b = row // K1
    pivot, active, inv_t, m = _row_facts(row, K1, n_splits, temp_ptr, topk_ptr, topp_ptr, gkey_ptr, zmax_ptr,
                                         NS_P2)  # fmt: skip
    sp = tl.arange(0, NS_P2)
    if r == 0:
        tl.store(y_ptr + row, tl.where(pivot, ARGMAX, NOT_PIVOT).to(tl.int64))
        tl.store(lo_ptr + row, LOWEST)
        going = active
    else:
        going = active & (tl.load(lo_ptr + row) > LOWEST)
    if going:
        base = logits_ptr + b * stride_b + (row % K1) * stride_j
        top_p = tl.load(topp_ptr + b)
        min_p = tl.load(minp_ptr + b).to(tl.float32)
        per_split = 1 + tl.cdiv(SPLIT, BLOCK)
        part = part_ptr + row * n_splits * per_split
        mass = tl.sum(tl.load(part + sp * per_split, mask=sp < n_splits, other=0.0), axis=0)
        stream = (tl.load(offset_ptr + b) * (K1 + 1) + K1) << 32  # verify_stream
        seed = tl.load(seed_ptr + b)
        if r == 0:
            total = mass
            tl.store(total_ptr + row, total)
            kept = total < 0.0  # nothing drawn yet
        else:
            total = tl.load(total_ptr + row)
            kept = _kept(base, tl.load(y_ptr + row), mass, total, top_p, min_p, inv_t, m)
        lo = tl.load(lo_ptr + row)
        token = tl.load(y_ptr + row)
        draw_no = r + 0 * row
        drawing = ~kept
        while drawing:
            counter = K1 + 1 + draw_no * K1 + row % K1  # pivot_counter
            token = _draw(base, V, part, n_splits, tl.rand(seed, stream | counter), lo, inv_t, m, SPLIT, BLOCK,
                          NS_P2, NB_P2, SHIFT)  # fmt: skip
            lo = (sortable_key(tl.load(base + token).to(tl.float32)) >> SHIFT).to(tl.int64) + 1
            draw_no += 1
            if last:  # its check, here: the masses above it, split by split, which the next draw reads
                tl.debug_barrier()  # every thread has read the masses of the last draw
                mass = tl.zeros([], tl.float64)
                for s in range(0, n_splits):
                    mass += _split_mass(base, s * SPLIT, V, lo, inv_t, m, SPLIT, BLOCK, SHIFT, part + s * per_split)
                tl.debug_barrier()  # and they see the new ones
                kept = _kept(base, token, mass, total, top_p, min_p, inv_t, m)
                drawing = ~kept & (draw_no < ROUNDS)
            else:
                drawing = draw_no < 0  # the launches after this one check it
        token = tl.where(kept | ~last, token, ARGMAX)
        tl.store(y_ptr + row, token)
        tl.store(lo_ptr + row, tl.where(kept, LOWEST, lo))


@triton.jit
def pivot_step(logits_ptr, stride_b, stride_j, temp_ptr, topk_ptr, topp_ptr, minp_ptr, seed_ptr, offset_ptr,
               gkey_ptr, zmax_ptr, lo_ptr, y_ptr, total_ptr, part_ptr, r, row, sp, V, K1, n_splits, SPLIT,
               BLOCK: tl.constexpr, NS_P2: tl.constexpr, NB_P2: tl.constexpr, SHIFT: tl.constexpr,
               ROUNDS: tl.constexpr):  # fmt: skip
    """Step ``r`` of the draws (module docstring), run by program (row, split) of launch ``r`` of the cut-off
    rounds; nothing for ``r >= STEPS``."""
    if r < 2 * (LAST_DRAW + 1):
        if r % 2 == 0:
            _mass_step(logits_ptr, stride_b, stride_j, temp_ptr, topk_ptr, topp_ptr, gkey_ptr, zmax_ptr, lo_ptr,
                       part_ptr, r // 2, row, sp, V, K1, n_splits, SPLIT, BLOCK, NS_P2, SHIFT)  # fmt: skip
        elif sp == 0:
            _draw_step(logits_ptr, stride_b, stride_j, temp_ptr, topk_ptr, topp_ptr, minp_ptr, seed_ptr, offset_ptr,
                       gkey_ptr, zmax_ptr, lo_ptr, y_ptr, total_ptr, part_ptr, r // 2, row, V, K1, n_splits, SPLIT,
                       BLOCK, NS_P2, NB_P2, SHIFT, ROUNDS)  # fmt: skip


def pivot_buffers(rows: int, n_splits: int, split: int, device) -> tuple[torch.Tensor, ...]:
    """The draws' workspace ``(lo, y, total, part)`` for ``n_splits`` splits of ``split`` entries a row:
    ``part [rows, n_splits, 1 + blocks]`` float64 holds the masses of each split and of its blocks of
    ``BLOCK`` entries; ``y [rows]`` int64 holds the draws once the cut-off rounds have run (token, ``-1``: the
    row's argmax, ``-2``: not a pivot request)."""
    lo = torch.empty(rows, dtype=torch.int64, device=device)
    y = torch.empty(rows, dtype=torch.int64, device=device)
    total = torch.empty(rows, dtype=torch.float64, device=device)
    part = torch.empty((rows, n_splits, 1 + triton.cdiv(split, BLOCK)), dtype=torch.float64, device=device)
    return lo, y, total, part


def pivot_rounds() -> int:
    """:data:`.chain_sampling_ref.PIVOT_ROUNDS` as this module holds it now (tests lower it)."""
    return PIVOT_ROUNDS
