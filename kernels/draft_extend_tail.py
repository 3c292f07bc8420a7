"""Fused topk-1 draft-extend tail: argmax of the selected rows, with the hidden-row gather fused in.

``tokens[b] = argmax(logits[select[b]])`` (``torch.argmax`` semantics, bit for bit) and
``hidden_sel[b] = hidden[select[b]]``. Only the selected rows are read. ``select[b]`` outside
``[0, N)`` (padding) gives ``tokens[b] = -1`` and a zero hidden row, never an out-of-bounds read.

Launch 1: stage-1 argmax partials of the selected rows (:mod:`._argmax`). Launch 2: per request,
finish the reduction, write the token, and copy the hidden row (programs over ``D`` chunks).
Cost: reads B*V logits + B*D hidden; writes B tokens + B*D hidden.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ._argmax import argmax_partials, reduce_partials
from ._common import check, next_pow2, use_triton
from .greedy_verify import INDEX_DTYPES, LOGIT_DTYPES

BLOCK_D = 1024


class TailOutput(NamedTuple):
    """Shapes: ``tokens [B]`` int64, ``hidden [B, D]`` (hidden's dtype; ``None`` without hidden)."""

    tokens: torch.Tensor
    hidden: torch.Tensor | None


@triton.jit
def _tail_finalize_kernel(
    part_key_ptr,
    part_idx_ptr,
    select_ptr,
    tokens_ptr,
    hidden_ptr,
    stride_hidden,
    out_hidden_ptr,
    stride_out,
    n_splits,
    N,
    D,
    NS_P2: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_HIDDEN: tl.constexpr,
    HAS_SELECT: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    row = b
    if HAS_SELECT:
        row = tl.load(select_ptr + b).to(tl.int64)
    valid = (row >= 0) & (row < N)
    if c == 0:
        s = tl.arange(0, NS_P2)
        m = s < n_splits
        keys = tl.load(part_key_ptr + b * n_splits + s, mask=m, other=-2147483648)
        idx = tl.load(part_idx_ptr + b * n_splits + s, mask=m, other=2147483647)
        token = reduce_partials(keys[None, :], idx[None, :], 1)  # [1]
        token = tl.sum(token, axis=0).to(tl.int64)
        tl.store(tokens_ptr + b, tl.where(valid, token, -1))
    if HAS_HIDDEN:
        d = c * BLOCK_D + tl.arange(0, BLOCK_D)
        safe_row = tl.where(valid, row, 0)
        h = tl.load(hidden_ptr + safe_row * stride_hidden + d, mask=(d < D) & valid, other=0)
        tl.store(out_hidden_ptr + b * stride_out + d, h, mask=d < D)


def draft_extend_tail(
    logits: torch.Tensor,
    hidden: torch.Tensor | None,
    select: torch.Tensor,
    *,
    out_tokens: torch.Tensor | None = None,
    out_hidden: torch.Tensor | None = None,
    config: dict | None = None,
) -> TailOutput:
    """Argmax of ``logits[select]`` and ``hidden[select]`` in two launches, reading only selected rows.

    Parameters
    ----------
    logits:
        Shape: ``(N, V)``; float32/float16/bfloat16; unit stride along V.
    hidden:
        Shape: ``(N, D)`` with unit stride along D, or ``None`` (tokens only; used for draft steps).
    select:
        Shape: ``(B,)``; int32/int64 row indices into ``N`` (out of range: token -1, zero hidden row).
    out_tokens, out_hidden:
        Optional destinations (``[B]`` int64 and ``[B, D]``, unit stride along D), e.g. relay views.

    CUDA graph: safe to capture; no host syncs.
    """
    check(logits.dim() == 2, f"logits must be [N, V], got shape {tuple(logits.shape)}")
    check(logits.dtype in LOGIT_DTYPES, f"logits dtype {logits.dtype} not supported; use float32, float16 or bfloat16")
    check(logits.stride(-1) == 1 or logits.shape[-1] == 1, "logits must have unit stride along V")
    check(
        select.dim() == 1 and select.dtype in INDEX_DTYPES,
        f"select must be [B] int32/int64, got {tuple(select.shape)} {select.dtype}",
    )
    check(select.device == logits.device, f"select on {select.device}, logits on {logits.device}")
    N, V = logits.shape
    B = select.shape[0]
    check(V >= 1, "logits needs V >= 1")
    if hidden is not None:
        check(hidden.dim() == 2 and hidden.shape[0] == N, f"hidden must be [N={N}, D], got {tuple(hidden.shape)}")
        check(hidden.stride(-1) == 1, "hidden must have unit stride along D")
        check(hidden.device == logits.device, f"hidden on {hidden.device}, logits on {logits.device}")
    tokens = out_tokens if out_tokens is not None else torch.empty(B, dtype=torch.int64, device=logits.device)
    check(tokens.shape == (B,) and tokens.dtype == torch.int64, f"out_tokens must be [B={B}] int64")
    hid = None
    if hidden is not None:
        D = hidden.shape[1]
        hid = out_hidden if out_hidden is not None else torch.empty((B, D), dtype=hidden.dtype, device=hidden.device)
        check(
            hid.shape == (B, D) and hid.dtype == hidden.dtype and (hid.stride(-1) == 1 or D == 1),
            f"out_hidden must be [B={B}, D={D}] {hidden.dtype} with unit stride along D",
        )
    if B == 0:
        return TailOutput(tokens, hid)
    if N == 0 or not use_triton(logits):
        ref = draft_extend_tail_ref(logits, hidden, select)
        tokens.copy_(ref.tokens)
        if hid is not None:
            hid.copy_(ref.hidden)
        return TailOutput(tokens, hid)
    keys, idx, n_splits = argmax_partials(
        logits, N, 1, logits.stride(0), 0, row_index=select, programs=B, **(config or {})
    )
    _finalize(keys, idx, n_splits, select, tokens, hidden, hid, N)
    return TailOutput(tokens, hid)


def _finalize(keys, idx, n_splits, select, tokens, hidden, hid, N) -> None:
    D = hidden.shape[1] if hidden is not None else 0
    block_d = min(BLOCK_D, next_pow2(D)) if D else 1
    _tail_finalize_kernel[(tokens.shape[0], max(1, triton.cdiv(D, block_d)))](
        keys,
        idx,
        select if select is not None else tokens,
        tokens,
        hidden if hidden is not None else tokens,
        hidden.stride(0) if hidden is not None else 0,
        hid if hid is not None else tokens,
        hid.stride(0) if hid is not None else 0,
        n_splits,
        N,
        D,
        NS_P2=next_pow2(n_splits),
        BLOCK_D=block_d,
        HAS_HIDDEN=hidden is not None,
        HAS_SELECT=select is not None,
        num_warps=4,
    )


def draft_extend_tail_ref(logits: torch.Tensor, hidden: torch.Tensor | None, select: torch.Tensor) -> TailOutput:
    """Reference: index rows, argmax, gather (3+ launches). Same padding rule (-1 / zero row)."""
    N = logits.shape[0]
    valid = (select >= 0) & (select < N)
    safe = torch.where(valid, select, torch.zeros_like(select)).long()
    if N == 0:
        tokens = torch.full(select.shape, -1, dtype=torch.int64, device=logits.device)
    else:
        tokens = torch.where(valid, torch.argmax(logits.index_select(0, safe), dim=-1), -1)
    hid = None
    if hidden is not None:
        if N == 0:
            hid = torch.zeros((select.shape[0], hidden.shape[1]), dtype=hidden.dtype, device=hidden.device)
        else:
            rows = hidden.index_select(0, safe)
            hid = torch.where(valid[:, None], rows, torch.zeros((), dtype=hidden.dtype, device=hidden.device))
    return TailOutput(tokens, hid)


def argmax_rows(logits: torch.Tensor, *, out: torch.Tensor | None = None, config: dict | None = None) -> torch.Tensor:
    """``torch.argmax(logits, -1)`` bit for bit, for ``[N, V]`` logits, through the two-stage kernel.

    Used for the draft steps' topk-1 token. Shape: returns ``[N]`` int64. CUDA graph: safe.
    """
    check(
        logits.dim() == 2 and logits.dtype in LOGIT_DTYPES,
        f"logits must be [N, V] float, got {tuple(logits.shape)} {logits.dtype}",
    )
    check(logits.stride(-1) == 1 or logits.shape[-1] == 1, "logits must have unit stride along V")
    N = logits.shape[0]
    tokens = out if out is not None else torch.empty(N, dtype=torch.int64, device=logits.device)
    check(tokens.shape == (N,) and tokens.dtype == torch.int64, f"out must be [N={N}] int64")
    if N == 0:
        return tokens
    if not use_triton(logits):
        return tokens.copy_(torch.argmax(logits, dim=-1))
    keys, idx, n_splits = argmax_partials(logits, N, 1, logits.stride(0), 0, **(config or {}))
    _finalize(keys, idx, n_splits, None, tokens, None, None, N)
    return tokens
