"""The two-stage argmax shared by the greedy verify and the draft-extend tail.

``torch.argmax`` semantics, bit for bit: the lowest index wins ties, a NaN counts as larger than
everything (the first NaN wins), ``-0.0 == +0.0``, and an all ``-inf`` row gives 0.

Stage 1: each program reduces ``SPLIT`` consecutive entries of one row to a partial
``(max value, lowest index of it, first NaN index)``, in the float domain (per element: a compare and two
selects for the maximum, a compare, select and min for NaNs). Stage 2 reduces a row's partials: the
first NaN if any, else the largest value with the lowest index. Stage 2 runs either in a second launch
or, with a zeroed ``workspace`` counter per request, in the same launch: the program that arrives last
for a request (an acq_rel atomic on its counter) finishes the reduction and resets the counter.
Cost: reads each logit once; writes 12 bytes per program.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import jit_any_batch, vocab_split

BLOCK_V = 2048
NUM_WARPS = 4


def default_config(rows: int) -> dict:
    """Stage-1 launch settings by number of rows, from the H200 sweeps in benchmarks/results: about one
    program per SM for a few rows or many (8-block splits), more programs for medium batches."""
    if 8 < rows <= 64:
        return {"block": 2048, "num_warps": 8, "target_programs": 528}
    return {"block": 1024, "num_warps": 8, "target_programs": 132}


def launch_config(rows: int, config: dict | None) -> dict:
    """:func:`default_config` for ``rows`` updated by the caller's ``config``, checked.

    Raises
    ------
    ValueError
        For an unknown key, a ``block`` that is not a power of two in [16, 16384], ``num_warps`` not in
        1, 2, 4, 8, 16, 32, or ``target_programs`` < 1.
    """
    cfg = default_config(rows)
    unknown = sorted(set(config or {}) - set(cfg))
    if unknown:
        raise ValueError(f"unknown kernel config key(s) {unknown}; valid keys: {', '.join(cfg)}")
    cfg.update(config or {})
    block, warps, programs = cfg["block"], cfg["num_warps"], cfg["target_programs"]
    if not (isinstance(block, int) and 16 <= block <= 16384 and block & (block - 1) == 0):
        raise ValueError(f"config block={block!r} must be a power of two in [16, 16384], e.g. 1024")
    if warps not in (1, 2, 4, 8, 16, 32) or isinstance(warps, bool):
        raise ValueError(f"config num_warps={warps!r} must be one of 1, 2, 4, 8, 16, 32")
    if not (isinstance(programs, int) and not isinstance(programs, bool) and programs >= 1):
        raise ValueError(f"config target_programs={programs!r} must be an int >= 1")
    return cfg


#: One launch (last-arriving program finalizes) pays off while few programs share a request's counter.
ONE_LAUNCH_MAX_ROWS = 64


@triton.jit
def sortable_key(x):
    """fp32 -> int32 whose signed order matches torch's argmax order (NaN largest, -0 == +0)."""
    x = tl.where(x != x, float("nan"), x)
    x = tl.where(x == 0.0, 0.0, x)
    b = x.to(tl.int32, bitcast=True)
    return b ^ ((b >> 31) & 0x7FFFFFFF)


@triton.jit
def track_argmax(g_best, g_idx, x, inb, offs):
    """One block of a per-lane running argmax over sortable keys: ``(g_best, g_idx, key)`` updated with the
    block's float32 ``x`` at ``offs`` (where ``inb``); offsets rise, so the first index of a key is kept."""
    key = tl.where(inb, sortable_key(x), -2147483648)
    better = key > g_best
    return tl.where(better, key, g_best), tl.where(better, offs.to(tl.int32), g_idx), key


@triton.jit
def lanes_argmax(g_best, g_idx):
    """``(largest key, lowest index holding it)`` over :func:`track_argmax`'s lanes."""
    gk = tl.max(g_best, axis=0)
    return gk, tl.min(tl.where(g_best == gk, g_idx, 2147483647), axis=0)


@triton.jit
def split_argmax(base, V, start, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    """``(max, lowest index of max, first NaN index or INT32_MAX)`` over ``[start, start + SPLIT) ∩ [0, V)``.

    Per element and lane: a compare and two selects (value, iteration number) and an OR for NaN presence.
    The first NaN's exact index is found by a second pass over the split, only when a NaN was seen.
    ``SPLIT`` is a constexpr here, unlike in the sampling kernels: with its trip count known, this
    memory-bound loop runs measurably faster, which is worth a compile per split size.
    """
    lanes = tl.arange(0, BLOCK)
    x = tl.load(base + start + lanes, mask=start + lanes < V, other=float("-inf")).to(tl.float32)
    has_nan = x != x
    best = tl.where(has_nan, float("-inf"), x)
    best_it = tl.zeros([BLOCK], tl.int32)
    for i in range(1, SPLIT // BLOCK):
        offs = start + i * BLOCK + lanes
        x = tl.load(base + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
        better = x > best
        best = tl.where(better, x, best)
        best_it = tl.where(better, i, best_it)
        has_nan = has_nan | (x != x)
    m = tl.max(best, axis=0)
    idx = tl.min(tl.where(best == m, (start + best_it * BLOCK + lanes).to(tl.int32), 2147483647), axis=0)
    first_nan = tl.full([], 2147483647, tl.int32)
    if tl.max(has_nan.to(tl.int32), axis=0) > 0:  # rare: find the first NaN exactly
        nan_idx = tl.full([BLOCK], 2147483647, tl.int32)
        for i in range(0, SPLIT // BLOCK):
            offs = start + i * BLOCK + lanes
            x = tl.load(base + offs, mask=offs < V, other=0.0).to(tl.float32)
            nan_idx = tl.minimum(nan_idx, tl.where(x != x, offs, 2147483647).to(tl.int32))
        first_nan = tl.min(nan_idx, axis=0)
    return m, idx, first_nan


@triton.jit
def reduce_partials(vals, idx, nans, axis: tl.constexpr):
    """Combine partials along ``axis`` (masked entries: val -inf, idx/nan INT32_MAX) into the argmax."""
    first_nan = tl.min(nans, axis=axis)
    m = tl.max(vals, axis=axis)
    if axis == 1:
        hit = vals == m[:, None]
    else:
        hit = vals == m[None, :]
    best = tl.min(tl.where(hit, idx, 2147483647), axis=axis)
    return tl.where(first_nan < 2147483647, first_nan, best)


@triton.jit
def arrived_last(counter_ptr, total):
    """True in the program that arrives last (of ``total``) at ``counter_ptr``; it resets the counter.

    Every program's earlier stores are visible to that program: the CTA barrier orders them before the
    release part of the atomic, and the acquire part orders the last program's later loads after it.
    """
    tl.debug_barrier()
    seen = tl.atomic_add(counter_ptr, 1, sem="acq_rel", scope="gpu")
    last = seen == total - 1
    if last:
        tl.atomic_xchg(counter_ptr, 0, sem="relaxed", scope="gpu")
    return last


@triton.jit
def _row_base(logits_ptr, row_index_ptr, p, K1, stride_b, stride_j, num_rows, ROW_INDEXED: tl.constexpr):
    row = p.to(tl.int64)
    if ROW_INDEXED:
        row = tl.load(row_index_ptr + p).to(tl.int64)
        row = tl.where((row >= 0) & (row < num_rows), row, 0)
    return logits_ptr + (row // K1) * stride_b + (row % K1) * stride_j


@jit_any_batch
def _argmax_partial_kernel(
    logits_ptr,
    row_index_ptr,
    val_ptr,
    idx_ptr,
    nan_ptr,
    V,
    K1,
    stride_b,
    stride_j,
    num_rows,
    n_splits,
    SPLIT: tl.constexpr,
    BLOCK: tl.constexpr,
    ROW_INDEXED: tl.constexpr,
):
    p = tl.program_id(0)
    s = tl.program_id(1)
    base = _row_base(logits_ptr, row_index_ptr, p, K1, stride_b, stride_j, num_rows, ROW_INDEXED)
    m, idx, nan = split_argmax(base, V, s.to(tl.int64) * SPLIT, SPLIT, BLOCK)
    out = p.to(tl.int64) * n_splits + s
    tl.store(val_ptr + out, m)
    tl.store(idx_ptr + out, idx)
    tl.store(nan_ptr + out, nan)


def split_plan(programs: int, V: int, block: int, target_programs: int) -> tuple[int, int]:
    """``(SPLIT, n_splits)`` for ``programs`` rows of ``V`` entries."""
    split = vocab_split(programs, V, block=block, target_programs=target_programs)
    return split, triton.cdiv(V, split)


def partial_buffers(programs: int, n_splits: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    shape = (programs, n_splits)
    return (
        torch.empty(shape, dtype=torch.float32, device=device),
        torch.empty(shape, dtype=torch.int32, device=device),
        torch.empty(shape, dtype=torch.int32, device=device),
    )


def argmax_partials(
    logits: torch.Tensor,
    num_rows: int,
    k1: int,
    stride_b: int,
    stride_j: int,
    row_index: torch.Tensor | None = None,
    *,
    programs: int | None = None,
    block: int = BLOCK_V,
    num_warps: int = NUM_WARPS,
    target_programs: int = 264,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Launch stage 1 over ``programs`` rows (``row_index[p]`` or ``p``); return (vals, idx, nans, n_splits).

    Shapes: each partial is ``[programs, n_splits]`` (float32, int32, int32).
    """
    V = logits.shape[-1]
    programs = num_rows if programs is None else programs
    split, n_splits = split_plan(programs, V, block, target_programs)
    vals, idx, nans = partial_buffers(programs, n_splits, logits.device)
    _argmax_partial_kernel[(programs, n_splits)](
        logits,
        vals if row_index is None else row_index,
        vals,
        idx,
        nans,
        V,
        k1,
        stride_b,
        stride_j,
        num_rows,
        n_splits,
        SPLIT=split,
        BLOCK=block,
        ROW_INDEXED=row_index is not None,
        num_warps=num_warps,
    )
    return vals, idx, nans, n_splits


@triton.jit
def reduce_keys(keys, idx, axis: tl.constexpr):
    """Reduce (sortable key, index) partials along ``axis``: largest key, lowest index among equal keys."""
    m = tl.max(keys, axis=axis)
    if axis == 1:
        hit = keys == m[:, None]
    else:
        hit = keys == m[None, :]
    return tl.min(tl.where(hit, idx, 2147483647), axis=axis)
