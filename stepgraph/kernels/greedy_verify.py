"""Fused greedy chain verify: a two-stage argmax over ``[B, K+1, V]`` logits fused with chain acceptance.

For request ``b``: ``predict[j] = argmax(logits[b, j])`` (``torch.argmax`` bit for bit), ``n`` = the number
of leading ``j < K`` with ``draft[j] == predict[j]``, ``bonus = predict[n]``. Optional outputs a step needs
are written in the same launch: ``accept_len = n + 1``, ``new_seq_lens = seq_lens + n + 1`` and the
select index ``b * (K + 1) + n`` (the row the draft-extend tail reads).

Stage 1 splits the vocabulary across programs (:mod:`._argmax`); stage 2 runs once per request, finishes
the reduction and walks the chain with a predicate (no data-dependent exit). Stage 2 is a second launch,
or, given a workspace, runs in the last program of each request within the same launch.
Cost: reads B*(K+1)*V logits once + B*K drafts; writes B*(K+1) + a few B-sized outputs.
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

LOGIT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INDEX_DTYPES = (torch.int32, torch.int64)


class GreedyVerifyOutput(NamedTuple):
    """Shapes: ``predict [B, K+1]`` int64, ``num_accepted [B]`` int64 (drafts only), ``bonus [B]`` int64;
    optional ``accept_len [B]`` (= n + 1), ``new_seq_lens [B]`` (seq_lens dtype), ``select [B]`` int64,
    ``emitted [B, K+1]`` (``predict`` with -1 after the bonus: the tokens a step emits)."""

    predict: torch.Tensor
    num_accepted: torch.Tensor
    bonus: torch.Tensor
    accept_len: torch.Tensor | None = None
    new_seq_lens: torch.Tensor | None = None
    select: torch.Tensor | None = None
    emitted: torch.Tensor | None = None


@triton.jit
def _finalize_request(
    b,
    val_ptr,
    idx_ptr,
    nan_ptr,
    n_splits,
    draft_ptr,
    stride_draft_b,
    seq_lens_ptr,
    predict_ptr,
    num_acc_ptr,
    bonus_ptr,
    accept_len_ptr,
    new_seq_ptr,
    select_ptr,
    emitted_ptr,
    K,
    K1_P2: tl.constexpr,
    NS_P2: tl.constexpr,
    HAS_SEQ: tl.constexpr,
    HAS_ACCEPT_LEN: tl.constexpr,
    HAS_SELECT: tl.constexpr,
    HAS_EMITTED: tl.constexpr,
):
    """Finish request ``b``'s K+1 argmaxes from the partials and walk the chain (no data-dependent exit)."""
    j = tl.arange(0, K1_P2)
    s = tl.arange(0, NS_P2)
    rows = b * (K + 1) + j
    m2 = (j[:, None] <= K) & (s[None, :] < n_splits)
    offs = rows[:, None] * n_splits + s[None, :]
    vals = tl.load(val_ptr + offs, mask=m2, other=float("-inf"), cache_modifier=".cg")
    idx = tl.load(idx_ptr + offs, mask=m2, other=2147483647, cache_modifier=".cg")
    nans = tl.load(nan_ptr + offs, mask=m2, other=2147483647, cache_modifier=".cg")
    predict = reduce_partials(vals, idx, nans, 1).to(tl.int64)  # [K1_P2]
    tl.store(predict_ptr + b * (K + 1) + j, predict, mask=j <= K)

    draft = tl.load(draft_ptr + b * stride_draft_b + j, mask=j < K, other=0).to(tl.int64)
    mismatch = (j < K) & (draft != predict)
    n = tl.min(tl.where(mismatch, j, K), axis=0).to(tl.int64)  # leading matches
    bonus = tl.sum(tl.where(j == n, predict, 0), axis=0)
    tl.store(num_acc_ptr + b, n)
    tl.store(bonus_ptr + b, bonus)
    if HAS_ACCEPT_LEN:
        tl.store(accept_len_ptr + b, n + 1)
    if HAS_SEQ:
        s_len = tl.load(seq_lens_ptr + b)
        tl.store(new_seq_ptr + b, (s_len + n + 1).to(s_len.dtype))
    if HAS_SELECT:
        tl.store(select_ptr + b, b * (K + 1) + n)
    if HAS_EMITTED:
        tl.store(emitted_ptr + b * (K + 1) + j, tl.where(j <= n, predict, -1), mask=j <= K)


@jit_any_batch
def _greedy_verify_finalize_kernel(
    val_ptr, idx_ptr, nan_ptr, n_splits, draft_ptr, stride_draft_b, seq_lens_ptr,
    predict_ptr, num_acc_ptr, bonus_ptr, accept_len_ptr, new_seq_ptr, select_ptr, emitted_ptr, K,
    K1_P2: tl.constexpr, NS_P2: tl.constexpr, HAS_SEQ: tl.constexpr, HAS_ACCEPT_LEN: tl.constexpr,
    HAS_SELECT: tl.constexpr, HAS_EMITTED: tl.constexpr,
):  # fmt: skip
    """Launch 2 of the two-launch form: one program per request."""
    b = tl.program_id(0).to(tl.int64)
    _finalize_request(
        b, val_ptr, idx_ptr, nan_ptr, n_splits, draft_ptr, stride_draft_b, seq_lens_ptr,
        predict_ptr, num_acc_ptr, bonus_ptr, accept_len_ptr, new_seq_ptr, select_ptr, emitted_ptr, K,
        K1_P2, NS_P2, HAS_SEQ, HAS_ACCEPT_LEN, HAS_SELECT, HAS_EMITTED,
    )  # fmt: skip


@jit_any_batch
def _greedy_verify_one_launch_kernel(
    logits_ptr, stride_b, stride_j, V, counter_ptr,
    val_ptr, idx_ptr, nan_ptr, n_splits, draft_ptr, stride_draft_b, seq_lens_ptr,
    predict_ptr, num_acc_ptr, bonus_ptr, accept_len_ptr, new_seq_ptr, select_ptr, emitted_ptr, K,
    SPLIT: tl.constexpr, BLOCK: tl.constexpr,
    K1_P2: tl.constexpr, NS_P2: tl.constexpr, HAS_SEQ: tl.constexpr, HAS_ACCEPT_LEN: tl.constexpr,
    HAS_SELECT: tl.constexpr, HAS_EMITTED: tl.constexpr,
):  # fmt: skip
    """Both stages in one launch: the last program to finish a request's partials finalizes it."""
    p = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    K1 = K + 1
    b = p // K1
    base = logits_ptr + b * stride_b + (p % K1) * stride_j
    m, idx, nan = split_argmax(base, V, s.to(tl.int64) * SPLIT, SPLIT, BLOCK)
    out = p * n_splits + s
    tl.store(val_ptr + out, m)
    tl.store(idx_ptr + out, idx)
    tl.store(nan_ptr + out, nan)
    if arrived_last(counter_ptr + b, K1 * n_splits):
        _finalize_request(
            b, val_ptr, idx_ptr, nan_ptr, n_splits, draft_ptr, stride_draft_b, seq_lens_ptr,
            predict_ptr, num_acc_ptr, bonus_ptr, accept_len_ptr, new_seq_ptr, select_ptr, emitted_ptr, K,
            K1_P2, NS_P2, HAS_SEQ, HAS_ACCEPT_LEN, HAS_SELECT, HAS_EMITTED,
        )  # fmt: skip


def _check_inputs(logits: torch.Tensor, draft_tokens: torch.Tensor, seq_lens: torch.Tensor | None) -> None:
    check(logits.dim() == 3, f"logits must be [B, K+1, V], got shape {tuple(logits.shape)}")
    check(logits.dtype in LOGIT_DTYPES, f"logits dtype {logits.dtype} not supported; use float32, float16 or bfloat16")
    check(draft_tokens.dim() == 2, f"draft_tokens must be [B, K], got shape {tuple(draft_tokens.shape)}")
    check(draft_tokens.dtype in INDEX_DTYPES, f"draft_tokens must be int32 or int64, got {draft_tokens.dtype}")
    B, K1, V = logits.shape
    check(draft_tokens.shape[0] == B, f"draft_tokens has {draft_tokens.shape[0]} rows, logits has B={B}")
    check(
        draft_tokens.shape[1] == K1 - 1,
        f"K mismatch: logits has K+1={K1} rows per request, drafts have K={draft_tokens.shape[1]}",
    )
    check(K1 >= 1 and V >= 1, f"logits needs K+1 >= 1 and V >= 1, got {tuple(logits.shape)}")
    check(V <= 2**31 - 1, f"vocabulary {V} too large (int32 indices)")
    check(logits.stride(-1) == 1 or V == 1, f"logits must have unit stride along V, got stride {logits.stride(-1)}")
    check(draft_tokens.stride(-1) == 1 or K1 <= 2, "draft_tokens must have unit stride along K")
    check(draft_tokens.device == logits.device, f"draft_tokens on {draft_tokens.device}, logits on {logits.device}")
    if seq_lens is not None:
        check(seq_lens.shape == (B,), f"seq_lens must be [B]={B}, got {tuple(seq_lens.shape)}")
        check(seq_lens.dtype in INDEX_DTYPES, f"seq_lens must be int32 or int64, got {seq_lens.dtype}")
        check(seq_lens.device == logits.device, f"seq_lens on {seq_lens.device}, logits on {logits.device}")
        check(seq_lens.is_contiguous(), "seq_lens must be contiguous (the kernel reads element b at b)")


def _outputs(
    B: int, K1: int, device, seq_lens, out: dict | None, with_accept_len: bool, with_select: bool, with_emitted: bool
):
    out = dict(out or {})

    def get(name, shape, dtype):
        t = out.get(name)
        if t is None:
            return torch.empty(shape, dtype=dtype, device=device)
        check(
            tuple(t.shape) == shape and t.dtype == dtype and t.is_contiguous(),
            f"out[{name!r}] must be a contiguous {dtype} tensor of shape {shape}",
        )
        check(t.device == device, f"out[{name!r}] is on {t.device}, expected {device}")
        return t

    return GreedyVerifyOutput(
        predict=get("predict", (B, K1), torch.int64),
        num_accepted=get("num_accepted", (B,), torch.int64),
        bonus=get("bonus", (B,), torch.int64),
        accept_len=get("accept_len", (B,), torch.int64) if with_accept_len else None,
        new_seq_lens=get("new_seq_lens", (B,), seq_lens.dtype) if seq_lens is not None else None,
        select=get("select", (B,), torch.int64) if with_select else None,
        emitted=get("emitted", (B, K1), torch.int64) if with_emitted else None,
    )


def greedy_chain_verify(
    logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    seq_lens: torch.Tensor | None = None,
    *,
    with_accept_len: bool = False,
    with_select: bool = False,
    with_emitted: bool = False,
    out: dict[str, torch.Tensor] | None = None,
    workspace: torch.Tensor | None = None,
    config: dict | None = None,
) -> GreedyVerifyOutput:
    """Greedy chain verification fused with a two-stage argmax, in two launches.

    Parameters
    ----------
    logits:
        Target logits. Shape: ``(B, K + 1, V)``; float32/float16/bfloat16; unit stride along V.
    draft_tokens:
        Shape: ``(B, K)``; int32 or int64.
    seq_lens:
        Optional ``(B,)`` lengths before the step; gives ``new_seq_lens = seq_lens + n + 1``.
    with_accept_len, with_select, with_emitted:
        Also write ``accept_len = n + 1``, ``select = b * (K + 1) + n`` and ``emitted`` (``predict`` with
        -1 after position ``n``).
    out:
        Optional output tensors by field name (written in place, e.g. relay slot views).
    workspace:
        A zeroed int32 tensor of at least B elements, kept by the caller across calls: both stages then
        run in **one** launch (the last program of each request finalizes it and re-zeroes its counter)
        when ``B * (K + 1) <= 64``. ``None`` (or larger batches): two launches.
    config:
        Optional ``{"block", "num_warps", "target_programs"}`` for stage 1.

    Returns
    -------
    GreedyVerifyOutput
        ``predict`` equals ``torch.argmax(logits, -1)`` bit for bit (lowest index on ties, first NaN,
        0 for an all ``-inf`` row).

    CUDA graph: safe to capture; no host syncs. ``B = 0`` returns empty outputs without a launch.
    """
    _check_inputs(logits, draft_tokens, seq_lens)
    B, K1, V = logits.shape
    cfg = launch_config(B * K1, config)
    res = _outputs(B, K1, logits.device, seq_lens, out, with_accept_len, with_select, with_emitted)
    if B == 0:
        return res
    if not use_triton(logits):
        return _fill_from_ref(res, greedy_chain_verify_ref(logits, draft_tokens, seq_lens))
    K = K1 - 1
    drafts = draft_tokens if K > 0 else res.predict  # never read when K == 0
    dummy = res.predict
    tail_args = (
        drafts,
        drafts.stride(0),
        seq_lens if seq_lens is not None else dummy,
        res.predict,
        res.num_accepted,
        res.bonus,
        res.accept_len if res.accept_len is not None else dummy,
        res.new_seq_lens if res.new_seq_lens is not None else dummy,
        res.select if res.select is not None else dummy,
        res.emitted if res.emitted is not None else dummy,
        K,
    )
    flags = {
        "HAS_SEQ": seq_lens is not None,
        "HAS_ACCEPT_LEN": res.accept_len is not None,
        "HAS_SELECT": res.select is not None,
        "HAS_EMITTED": res.emitted is not None,
    }
    if workspace is None or B * K1 > ONE_LAUNCH_MAX_ROWS:
        vals, idx, nans, n_splits = argmax_partials(logits, B * K1, K1, logits.stride(0), logits.stride(1), **cfg)
        _greedy_verify_finalize_kernel[(B,)](
            vals, idx, nans, n_splits, *tail_args,
            K1_P2=next_pow2(K1), NS_P2=next_pow2(n_splits), **flags,
            num_warps=1 if next_pow2(K1) * next_pow2(n_splits) <= 512 else 4,
        )  # fmt: skip
        return res
    check(workspace.dtype == torch.int32 and workspace.numel() >= B and workspace.device == logits.device,
          f"workspace must be a zeroed int32 tensor of >= {B} elements on {logits.device}")  # fmt: skip
    split, n_splits = split_plan(B * K1, V, cfg["block"], cfg["target_programs"])
    vals, idx, nans = partial_buffers(B * K1, n_splits, logits.device)
    _greedy_verify_one_launch_kernel[(B * K1, n_splits)](
        logits, logits.stride(0), logits.stride(1), V, workspace, vals, idx, nans, n_splits, *tail_args,
        SPLIT=split, BLOCK=cfg["block"], K1_P2=next_pow2(K1), NS_P2=next_pow2(n_splits), **flags,
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return res


def greedy_chain_verify_ref(
    logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    seq_lens: torch.Tensor | None = None,
    *,
    with_accept_len: bool = True,
    with_select: bool = True,
    with_emitted: bool = True,
    out: dict[str, torch.Tensor] | None = None,
) -> GreedyVerifyOutput:
    """Plain torch reference (argmax, compare, cumprod, gather): 4+ launches, same results. Every field is
    computed (the ``with_*`` flags are taken for parity with :func:`greedy_chain_verify`); ``out`` as there.

    Cost: reads B*(K+1)*V logits in argmax; the rest is O(B*K).
    """
    B, K1, _ = logits.shape
    predict = torch.argmax(logits, dim=-1)  # [B, K+1]
    if K1 > 1:
        match = (draft_tokens.long() == predict[:, :-1]).long()  # [B, K]
        n = match.cumprod(dim=1).sum(dim=1)  # leading matches
    else:
        n = torch.zeros(B, dtype=torch.long, device=logits.device)
    bonus = predict.gather(1, n.view(-1, 1)).view(-1)
    arange = torch.arange(B, device=logits.device)
    j = torch.arange(K1, device=logits.device)
    result = GreedyVerifyOutput(
        predict=predict,
        num_accepted=n,
        bonus=bonus,
        accept_len=n + 1,
        new_seq_lens=(seq_lens + n + 1).to(seq_lens.dtype) if seq_lens is not None else None,
        select=arange * K1 + n,
        emitted=torch.where(j[None, :] <= n[:, None], predict, -1),
    )
    return written_into(result, out)


def _fill_from_ref(res: GreedyVerifyOutput, ref: GreedyVerifyOutput) -> GreedyVerifyOutput:
    for name, t in res._asdict().items():
        if t is not None:
            t.copy_(getattr(ref, name))
    return res
