"""Stage 1 of the two-stage argmax shared by the greedy verify and the draft-extend tail.

``torch.argmax`` semantics, bit for bit: the lowest index wins ties, a NaN counts as larger than
everything (so the first NaN wins), ``-0.0 == +0.0``, and an all ``-inf`` row gives 0. Values are mapped
to int32 keys whose integer order is that float order (NaN canonicalised above +inf), so every
comparison is an exact integer comparison.

Each program reduces ``SPLIT`` consecutive vocabulary entries of one row to a (key, index) partial;
stage 2 (in the caller's kernel) reduces a row's partials, keeping the lowest index among equal keys.
Cost: reads each logit once (B*(K+1)*V elements); writes 8 bytes per program.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import vocab_split

INT32_MIN = -2147483648
INT32_MAX = 2147483647
BLOCK_V = 1024
NUM_WARPS = 4


@triton.jit
def sortable_key(x):
    """fp32 -> int32 whose signed order matches torch's argmax order (NaN largest, -0 == +0)."""
    x = tl.where(x != x, float("nan"), x)
    x = tl.where(x == 0.0, 0.0, x)
    b = x.to(tl.int32, bitcast=True)
    return b ^ ((b >> 31) & 0x7FFFFFFF)


@triton.jit
def _argmax_partial_kernel(
    logits_ptr,
    row_index_ptr,
    part_key_ptr,
    part_idx_ptr,
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
    row = p.to(tl.int64)
    if ROW_INDEXED:
        row = tl.load(row_index_ptr + p).to(tl.int64)
        row = tl.where((row >= 0) & (row < num_rows), row, 0)
    base = logits_ptr + (row // K1) * stride_b + (row % K1) * stride_j
    best_key = tl.full([BLOCK], -2147483648, tl.int32)
    best_idx = tl.zeros([BLOCK], tl.int32)
    start = s.to(tl.int64) * SPLIT
    for i in range(0, SPLIT, BLOCK):
        offs = start + i + tl.arange(0, BLOCK)
        x = tl.load(base + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
        key = tl.where(offs < V, sortable_key(x), -2147483648)
        better = key > best_key
        best_key = tl.where(better, key, best_key)
        best_idx = tl.where(better, offs.to(tl.int32), best_idx)
    m = tl.max(best_key, axis=0)
    idx = tl.min(tl.where(best_key == m, best_idx, 2147483647), axis=0)
    out = p.to(tl.int64) * n_splits + s
    tl.store(part_key_ptr + out, m)
    tl.store(part_idx_ptr + out, idx)


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
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Launch stage 1 over ``programs`` rows (``row_index[p]`` or ``p``); return (keys, idx, n_splits).

    Shapes: keys/idx are ``[programs, n_splits]`` int32.
    """
    V = logits.shape[-1]
    programs = num_rows if programs is None else programs
    split = vocab_split(programs, V, block=block, target_programs=target_programs)
    n_splits = triton.cdiv(V, split)
    keys = torch.empty((programs, n_splits), dtype=torch.int32, device=logits.device)
    idx = torch.empty((programs, n_splits), dtype=torch.int32, device=logits.device)
    _argmax_partial_kernel[(programs, n_splits)](
        logits,
        keys if row_index is None else row_index,
        keys,
        idx,
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
    return keys, idx, n_splits


@triton.jit
def reduce_partials(keys, idx, axis: tl.constexpr):
    """Reduce (key, index) partials along ``axis``: largest key, lowest index among equal keys."""
    m = tl.max(keys, axis=axis)
    if axis == 1:
        hit = keys == m[:, None]
    else:
        hit = keys == m[None, :]
    return tl.min(tl.where(hit, idx, 2147483647), axis=axis)
