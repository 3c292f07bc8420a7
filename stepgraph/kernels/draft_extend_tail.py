"""Fused topk-1 draft-extend tail: argmax of the selected rows, with the hidden-row gather fused in.

``tokens[b] = argmax(logits[select[b]])`` (``torch.argmax`` semantics, bit for bit) and
``hidden_sel[b] = hidden[select[b]]``. Only the selected rows are read. ``select[b]`` outside
``[0, N)`` (padding) gives ``tokens[b] = -1`` and a zero hidden row, never an out-of-bounds read.

Stage 1: argmax partials of the selected rows (:mod:`._argmax`). Stage 2: per request, finish the
reduction, write the token and copy the hidden row, in a second launch (programs over ``D`` chunks) or,
given a workspace, in the last program of each request within the same launch.
Cost: reads B*V logits + B*D hidden; writes B tokens + B*D hidden.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ._argmax import (
    ONE_LAUNCH_MAX_ROWS,
    argmax_partials,
    arrived_last,
    launch_config,
    partial_buffers,
    reduce_partials,
    split_argmax,
    split_plan,
)
from ._common import check, jit_any_batch, next_pow2, use_triton, written_into
from .greedy_verify import INDEX_DTYPES, LOGIT_DTYPES

BLOCK_D = 1024


class TailOutput(NamedTuple):
    """Shapes: ``tokens [B]`` int64, ``hidden [B, D]`` (hidden's dtype; ``None`` without hidden)."""

    tokens: torch.Tensor
    hidden: torch.Tensor | None


@triton.jit
def _tail_finalize(
    b, c, val_ptr, idx_ptr, nan_ptr, n_splits, select_ptr, tokens_ptr, hidden_ptr, stride_hidden,
    out_hidden_ptr, stride_out, N, D,
    NS_P2: tl.constexpr, BLOCK_D: tl.constexpr, D_CHUNKS: tl.constexpr, HAS_HIDDEN: tl.constexpr,
    HAS_SELECT: tl.constexpr,
):  # fmt: skip
    """Token of request ``b`` (when ``c == 0``) and ``D_CHUNKS`` chunks of its hidden row from chunk ``c``."""
    row = b
    if HAS_SELECT:
        row = tl.load(select_ptr + b).to(tl.int64)
    valid = (row >= 0) & (row < N)
    if c == 0:
        s = tl.arange(0, NS_P2)
        m = s < n_splits
        vals = tl.load(val_ptr + b * n_splits + s, mask=m, other=float("-inf"), cache_modifier=".cg")
        idx = tl.load(idx_ptr + b * n_splits + s, mask=m, other=2147483647, cache_modifier=".cg")
        nans = tl.load(nan_ptr + b * n_splits + s, mask=m, other=2147483647, cache_modifier=".cg")
        token = tl.sum(reduce_partials(vals[None, :], idx[None, :], nans[None, :], 1), axis=0).to(tl.int64)
        tl.store(tokens_ptr + b, tl.where(valid, token, -1))
    if HAS_HIDDEN:
        safe_row = tl.where(valid, row, 0)
        d_valid = tl.where(valid, D, 0)  # an invalid row loads nothing (one compare: a boolean mask everywhere)
        for k in range(D_CHUNKS):
            d = (c + k) * BLOCK_D + tl.arange(0, BLOCK_D)
            h = tl.load(hidden_ptr + safe_row * stride_hidden + d, mask=d < d_valid, other=0)
            tl.store(out_hidden_ptr + b * stride_out + d, h, mask=d < D)


@jit_any_batch
def _tail_finalize_kernel(
    val_ptr, idx_ptr, nan_ptr, n_splits, select_ptr, tokens_ptr, hidden_ptr, stride_hidden,
    out_hidden_ptr, stride_out, N, D,
    NS_P2: tl.constexpr, BLOCK_D: tl.constexpr, HAS_HIDDEN: tl.constexpr, HAS_SELECT: tl.constexpr,
):  # fmt: skip
    """Launch 2 of the two-launch form: programs over (request, hidden chunk)."""
    b = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    _tail_finalize(
        b, c, val_ptr, idx_ptr, nan_ptr, n_splits, select_ptr, tokens_ptr, hidden_ptr, stride_hidden,
        out_hidden_ptr, stride_out, N, D, NS_P2, BLOCK_D, 1, HAS_HIDDEN, HAS_SELECT,
    )  # fmt: skip


@jit_any_batch
def _tail_one_launch_kernel(
    logits_ptr, stride_n, V, counter_ptr,
    val_ptr, idx_ptr, nan_ptr, n_splits, select_ptr, tokens_ptr, hidden_ptr, stride_hidden,
    out_hidden_ptr, stride_out, N, D,
    SPLIT: tl.constexpr, BLOCK: tl.constexpr,
    NS_P2: tl.constexpr, BLOCK_D: tl.constexpr, D_CHUNKS: tl.constexpr, HAS_HIDDEN: tl.constexpr,
    HAS_SELECT: tl.constexpr,
):  # fmt: skip
    """Both stages in one launch: the last split program of a request writes its token and hidden row."""
    b = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    row = b
    if HAS_SELECT:
        row = tl.load(select_ptr + b).to(tl.int64)
        row = tl.where((row >= 0) & (row < N), row, 0)
    m, idx, nan = split_argmax(logits_ptr + row * stride_n, V, s.to(tl.int64) * SPLIT, SPLIT, BLOCK)
    out = b * n_splits + s
    tl.store(val_ptr + out, m)
    tl.store(idx_ptr + out, idx)
    tl.store(nan_ptr + out, nan)
    if arrived_last(counter_ptr + b, n_splits):
        _tail_finalize(
            b, 0, val_ptr, idx_ptr, nan_ptr, n_splits, select_ptr, tokens_ptr, hidden_ptr, stride_hidden,
            out_hidden_ptr, stride_out, N, D, NS_P2, BLOCK_D, D_CHUNKS, HAS_HIDDEN, HAS_SELECT,
        )  # fmt: skip


def _check_logits(logits: torch.Tensor) -> None:
    check(logits.dim() == 2, f"logits must be [N, V], got shape {tuple(logits.shape)}")
    check(logits.dtype in LOGIT_DTYPES, f"logits dtype {logits.dtype} not supported; use float32, float16 or bfloat16")
    check(logits.stride(-1) == 1 or logits.shape[-1] == 1, "logits must have unit stride along V")
    check(logits.shape[-1] >= 1, "logits needs V >= 1")


def _check_workspace(workspace: torch.Tensor, B: int, device) -> None:
    check(
        workspace.dtype == torch.int32 and workspace.numel() >= B and workspace.device == device,
        f"workspace must be a zeroed int32 tensor of >= {B} elements on {device}",
    )


def _launch(logits, hidden, select, tokens, hid, workspace, cfg: dict) -> None:
    N, V = logits.shape
    B = tokens.shape[0]
    D = hidden.shape[1] if hidden is not None else 0
    block_d = min(BLOCK_D, next_pow2(D)) if D else 1
    flags = {"HAS_HIDDEN": hidden is not None, "HAS_SELECT": select is not None}
    dummy = tokens
    rest = (
        select if select is not None else dummy,
        tokens,
        hidden if hidden is not None else dummy,
        hidden.stride(0) if hidden is not None else 0,
        hid if hid is not None else dummy,
        hid.stride(0) if hid is not None else 0,
        N,
        D,
    )
    if workspace is None or B > ONE_LAUNCH_MAX_ROWS:
        stride = logits.stride(0)
        vals, idx, nans, n_splits = argmax_partials(logits, N, 1, stride, 0, row_index=select, programs=B, **cfg)
        _tail_finalize_kernel[(B, max(1, triton.cdiv(D, block_d)))](
            vals, idx, nans, n_splits, *rest, NS_P2=next_pow2(n_splits), BLOCK_D=block_d, **flags, num_warps=4
        )
        return
    _check_workspace(workspace, B, logits.device)
    split, n_splits = split_plan(B, V, cfg["block"], cfg["target_programs"])
    vals, idx, nans = partial_buffers(B, n_splits, logits.device)
    _tail_one_launch_kernel[(B, n_splits)](
        logits, logits.stride(0), V, workspace, vals, idx, nans, n_splits, *rest,
        SPLIT=split, BLOCK=cfg["block"], NS_P2=next_pow2(n_splits), BLOCK_D=block_d,
        D_CHUNKS=max(1, triton.cdiv(D, block_d)), **flags, num_warps=cfg["num_warps"],
    )  # fmt: skip


def draft_extend_tail(
    logits: torch.Tensor,
    hidden: torch.Tensor | None,
    select: torch.Tensor,
    *,
    out_tokens: torch.Tensor | None = None,
    out_hidden: torch.Tensor | None = None,
    workspace: torch.Tensor | None = None,
    config: dict | None = None,
) -> TailOutput:
    """Argmax of ``logits[select]`` and ``hidden[select]``, reading only the selected rows.

    Parameters
    ----------
    logits:
        Shape: ``(N, V)``; float32/float16/bfloat16; unit stride along V.
    hidden:
        Shape: ``(N, D)`` with unit stride along D, or ``None`` (tokens only).
    select:
        Shape: ``(B,)``; int32/int64 row indices into ``N`` (out of range: token -1, zero hidden row).
    out_tokens, out_hidden:
        Optional destinations (``[B]`` int64 and ``[B, D]``, unit stride along D), e.g. relay views.
    workspace:
        A zeroed int32 tensor of at least B elements kept by the caller: one launch instead of two.

    Notes
    -----
    CUDA graph: safe to capture; no host syncs.
    """
    _check_logits(logits)
    cfg = launch_config(select.shape[0], config)  # a bad config is refused on every device
    check(
        select.dim() == 1 and select.dtype in INDEX_DTYPES and select.is_contiguous(),
        f"select must be a contiguous [B] int32/int64 tensor, got {tuple(select.shape)} {select.dtype}",
    )
    check(select.device == logits.device, f"select on {select.device}, logits on {logits.device}")
    N, V = logits.shape
    B = select.shape[0]
    if hidden is not None:
        check(hidden.dim() == 2 and hidden.shape[0] == N, f"hidden must be [N={N}, D], got {tuple(hidden.shape)}")
        check(hidden.stride(-1) == 1, "hidden must have unit stride along D")
        check(hidden.device == logits.device, f"hidden on {hidden.device}, logits on {logits.device}")
    tokens = out_tokens if out_tokens is not None else torch.empty(B, dtype=torch.int64, device=logits.device)
    check(
        tokens.shape == (B,) and tokens.dtype == torch.int64 and tokens.is_contiguous(),
        f"out_tokens must be a contiguous [B={B}] int64 tensor",
    )
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
        return draft_extend_tail_ref(logits, hidden, select, out_tokens=tokens, out_hidden=hid)
    _launch(logits, hidden, select, tokens, hid, workspace, cfg)
    return TailOutput(tokens, hid)


def draft_extend_tail_ref(
    logits: torch.Tensor,
    hidden: torch.Tensor | None,
    select: torch.Tensor,
    *,
    out_tokens: torch.Tensor | None = None,
    out_hidden: torch.Tensor | None = None,
) -> TailOutput:
    """Reference: index rows, argmax, gather (3+ launches). Same padding rule (-1 / zero row); ``out_tokens``
    and ``out_hidden`` as in :func:`draft_extend_tail`."""
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
    out = {"tokens": out_tokens, "hidden": out_hidden if hid is not None else None}
    return written_into(TailOutput(tokens, hid), {k: v for k, v in out.items() if v is not None})


def argmax_rows(
    logits: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
    workspace: torch.Tensor | None = None,
    config: dict | None = None,
) -> torch.Tensor:
    """``torch.argmax(logits, -1)`` bit for bit, for ``[N, V]`` logits, through the two-stage kernel.

    Used for the draft steps' topk-1 token. Shape: returns ``[N]`` int64. CUDA graph: safe.
    """
    _check_logits(logits)
    N = logits.shape[0]
    tokens = out if out is not None else torch.empty(N, dtype=torch.int64, device=logits.device)
    check(tokens.shape == (N,) and tokens.dtype == torch.int64, f"out must be [N={N}] int64")
    cfg = launch_config(N, config)
    if N == 0:
        return tokens
    if not use_triton(logits):
        return tokens.copy_(torch.argmax(logits, dim=-1))
    _launch(logits, None, None, tokens, None, workspace, cfg)
    return tokens
