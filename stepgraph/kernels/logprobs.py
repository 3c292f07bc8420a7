"""Log-probabilities of chosen tokens and each row's most probable tokens, in three or four launches without a sort.

For ``logits [B, R, V]`` and ``tokens [B, R]``: ``lse = log(sum(exp(x - s))) + s`` over each row with
``x`` the logits in float32 and ``s`` the row's largest logit (``0`` when that is infinite), the exponentials
taken and summed in float64 (exact enough that the sum's order does not show in the float32 result); then
``logprobs = x[token] - lse`` and the ``top_n`` entries of largest logit, by value and then lowest index
(NaN largest, ``-0.0 == +0.0``), with ``x - lse``. Launches:

1. per (row, vocabulary split): the split's largest key and, with ``top_n``, the largest key of each of
   ``MAXIMA_PER_ROW / splits`` disjoint subsets of its entries (a lane's running maximum);
2. with ``top_n``, one program per row: the bound ``T``, the ``top_n``-th largest subset maximum (``top_n``
   subsets reach it, so at least ``top_n`` entries do);
3. per (row, split): the split's float64 sum of ``exp(x - s)`` and, with ``top_n``, its entries ``>= T``
   listed in vocabulary order (``-inf`` ones aside);
4. one program per row: ``lse``, the chosen token's log-probability, and the ``top_n`` best of the listed
   entries. A row whose splits list more than ``GATHER_CAP`` entries (ties at ``T`` by the thousand) finds
   its ``top_n``-th key by a radix select over the row instead; entries tied at the cut that were not
   listed (``-inf`` ones, or ties past the cap) are taken by lowest index from a scan of the row.

Cost: two reads of the logits and a few bytes per program; no float32 copy of the logits.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ._argmax import sortable_key
from ._common import check, jit_any_batch, next_pow2, use_triton
from ._sampling_filter import NEG_INF_KEY_C, key_value
from ._sampling_topk import (
    NONE32,
    PASS_BLOCK,
    PASS_WARPS,
    _gathered,
    _kth_largest_by_digits,
    _list_selected,
    _row_radix_list,
)
from .chain_sampling import split_layout
from .chain_sampling_ref import sortable_keys
from .greedy_verify import INDEX_DTYPES, LOGIT_DTYPES

#: the most alternatives a row reports (the OpenAI API's ``top_logprobs`` limit)
TOP_N_MAX = 20
MAXIMA_PER_ROW = 1024  # subset maxima per row (>= 2 * TOP_N_MAX: a row's splits keep at least half of them)
GATHER_CAP = 512  # entries >= T one row may list; past it, the radix select
FINISH_WARPS = 4


class LogprobsOutput(NamedTuple):
    """``logprobs [B, R]`` float32 (rows whose token is -1 hold the score of token 0); ``top_ids [B, R, n]``
    int64 and ``top_logprobs [B, R, n]`` float32, most probable first."""

    logprobs: torch.Tensor
    top_ids: torch.Tensor
    top_logprobs: torch.Tensor


def row_lse_ref(logits: torch.Tensor) -> torch.Tensor:
    """``[..., V] -> [..., 1]`` float32: ``log(sum(exp(x - s))) + s`` (module docstring), exponentials and sum
    in float64. Equals ``torch.logsumexp`` up to its float32 rounding, also for ``±inf`` and NaN rows."""
    x = logits.float()
    m = x.amax(-1, keepdim=True)
    s = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    return (torch.log(torch.exp((x - s).double()).sum(-1, keepdim=True)) + s.double()).float()


def token_logprobs_ref(logits: torch.Tensor, tokens: torch.Tensor, top_n: int) -> LogprobsOutput:
    """The definition (module docstring) in torch: the reference of :func:`token_logprobs`, and its path where
    Triton cannot run. Cost: a ``topk`` over int64 keys that hold the value and the index."""
    x = logits.float()
    lse = row_lse_ref(logits)
    V = x.shape[-1]
    t = tokens.long()
    chosen = x.gather(-1, torch.where((t >= 0) & (t < V), t, 0)[..., None])[..., 0] - lse[..., 0]
    if top_n:
        # value first, then the lowest index: unique keys, so topk's order is the definition's
        order = sortable_keys(x) * (1 << 32) + (V - 1 - torch.arange(V, device=x.device))
        ids = order.topk(top_n, -1).indices
        top = x.gather(-1, ids) - lse
    else:
        ids = torch.empty((*tokens.shape, 0), dtype=torch.int64, device=x.device)
        top = torch.empty((*tokens.shape, 0), dtype=torch.float32, device=x.device)
    return LogprobsOutput(chosen, ids, top)


@jit_any_batch
def _maxima_kernel(logits_ptr, stride_b, stride_r, key_ptr, maxima_ptr, V, R, n_splits, SPLIT,
                   BLOCK: tl.constexpr, M: tl.constexpr, TOP: tl.constexpr):  # fmt: skip
    """Launch 1, per (row, split): the split's largest key and (``TOP``) its ``M`` subset maxima."""
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    base = logits_ptr + (row // R) * stride_b + (row % R) * stride_r
    best = tl.full([BLOCK], NONE32, tl.int32)
    start = sp * SPLIT
    for i in range(0, SPLIT, BLOCK):
        offs = start + i + tl.arange(0, BLOCK)
        inb = offs < V
        x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
        best = tl.maximum(best, tl.where(inb, sortable_key(x), NONE32))
    out = row * n_splits + sp
    tl.store(key_ptr + out, tl.max(best, axis=0))
    if TOP:  # lane l covers entries l, l + BLOCK, ...: subset s is lanes [s * BLOCK / M, ...)
        tl.store(maxima_ptr + out * M + tl.arange(0, M), tl.max(tl.reshape(best, [M, BLOCK // M]), axis=1))


@jit_any_batch
def _bound_kernel(maxima_ptr, bound_ptr, top_n, n_splits, MAXIMA: tl.constexpr, M: tl.constexpr):
    """Launch 2, one program per row: ``T``, the ``top_n``-th largest of the row's subset maxima."""
    row = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, MAXIMA)
    has = c // M < n_splits
    mx = tl.load(maxima_ptr + row * n_splits * M + c, mask=has, other=NONE32)
    tl.store(bound_ptr + row, _kth_largest_by_digits(mx, has, top_n, 32).to(tl.int32))


@triton.jit
def _row_shift(key_ptr, row, n_splits, NS_P2: tl.constexpr):
    """The row's largest logit from the splits' keys, as the shift ``s`` (0 when it is infinite; NaN stays)."""
    sp = tl.arange(0, NS_P2)
    top = tl.max(tl.load(key_ptr + row * n_splits + sp, mask=sp < n_splits, other=NONE32), axis=0)
    m = key_value(top, 0)
    infinite = (m.to(tl.int32, bitcast=True) & 0x7FFFFFFF) == 0x7F800000  # by its bits: fast-math may fold inf tests
    return tl.where(infinite, 0.0, m)


@jit_any_batch
def _sum_list_kernel(logits_ptr, stride_b, stride_r, key_ptr, bound_ptr, sum_ptr, list_ptr, count_ptr, V, R,
                     n_splits, SPLIT, BLOCK: tl.constexpr, NS_P2: tl.constexpr, TOP: tl.constexpr,
                     GCAP: tl.constexpr):  # fmt: skip
    """Launch 3, per (row, split): ``sum exp(x - s)`` in float64, and (``TOP``) the entries ``>= T`` listed."""
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    base = logits_ptr + (row // R) * stride_b + (row % R) * stride_r
    shift = _row_shift(key_ptr, row, n_splits, NS_P2)
    out = list_ptr + (row * n_splits + sp) * GCAP
    thresh = NONE32
    if TOP:
        thresh = tl.maximum(tl.load(bound_ptr + row), NEG_INF_KEY_C + 1)
    total = tl.zeros([BLOCK], tl.float64)
    n = sp * 0
    start = sp * SPLIT
    for i in range(0, SPLIT, BLOCK):
        offs = start + i + tl.arange(0, BLOCK)
        inb = offs < V
        x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
        total += tl.where(inb, tl.exp((x - shift).to(tl.float64)), 0.0)
        if TOP:
            n = _list_selected(out, n, offs, inb & (sortable_key(x) >= thresh), GCAP)
    tl.store(sum_ptr + row * n_splits + sp, tl.sum(total, axis=0))
    if TOP:
        tl.store(count_ptr + row * n_splits + sp, n)


@jit_any_batch
def _finish_kernel(logits_ptr, stride_b, stride_r, tokens_ptr, stride_tb, stride_tr, key_ptr, bound_ptr, sum_ptr,
                   list_ptr, count_ptr, lp_ptr, ids_ptr, top_ptr, V, R, n_splits, top_n, SPLIT,
                   BLOCK: tl.constexpr, NS_P2: tl.constexpr, N_P2: tl.constexpr, TOP: tl.constexpr,
                   GCAP: tl.constexpr):  # fmt: skip
    """Launch 4, one program per row: ``lse``, the chosen token's score, then the ``top_n`` best entries."""
    row = tl.program_id(0).to(tl.int64)
    b = row // R
    base = logits_ptr + b * stride_b + (row % R) * stride_r
    sp = tl.arange(0, NS_P2)
    shift = _row_shift(key_ptr, row, n_splits, NS_P2)
    total = tl.sum(tl.load(sum_ptr + row * n_splits + sp, mask=sp < n_splits, other=0.0), axis=0)
    lse = (tl.log(total) + shift.to(tl.float64)).to(tl.float32)
    tok = tl.load(tokens_ptr + b * stride_tb + (row % R) * stride_tr).to(tl.int64)
    x_tok = tl.load(base + tl.where((tok >= 0) & (tok < V), tok, 0)).to(tl.float32)
    tl.store(lp_ptr + row, x_tok - lse)
    if TOP:
        counts = tl.load(count_ptr + row * n_splits + sp, mask=sp < n_splits, other=0)
        listed = tl.sum(counts, axis=0)
        c = tl.arange(0, GCAP)
        if listed <= GCAP:  # the entries >= T, each split's list after the one before
            idx, valid = _gathered(list_ptr, count_ptr, row, n_splits, NS_P2, GCAP, GCAP)
            tie = (listed * 0 + NEG_INF_KEY_C).to(tl.int32)  # fewer than top_n listed: the rest are -inf
        else:  # more than GCAP entries reach T: the row's own radix select finds the top_n-th key
            out = list_ptr + row * n_splits * GCAP
            n_listed, cut, n_ties, tie_n = _row_radix_list(base, V, top_n.to(tl.int64), out, NS_P2, SPLIT, BLOCK, 0,
                                                           32, GCAP)  # fmt: skip
            tl.debug_barrier()  # the list's stores are seen by every thread of the program
            valid = c < n_listed
            idx = tl.load(out + c, mask=valid, other=0)
            tie = cut.to(tl.int32)  # ties past the cap are not listed (only the entries above them are)
        x = tl.load(base + idx, mask=valid, other=float("-inf")).to(tl.float32)
        key = tl.where(valid, sortable_key(x), NONE32)
        # the listed entries by key, then lowest index: the best top_n of them, one at a time
        rank = tl.arange(0, N_P2)
        top_idx = tl.zeros([N_P2], tl.int32) - 1
        top_x = tl.zeros([N_P2], tl.float32)
        taken = c < 0
        for i in range(0, top_n):
            left = valid & ~taken
            best = tl.max(tl.where(left, key, NONE32), axis=0)
            pick = tl.min(tl.where(left & (key == best), idx, 2147483647), axis=0)
            has = tl.max(left.to(tl.int32), axis=0) > 0
            chosen = left & (idx == pick) & has
            taken = taken | chosen
            top_idx = tl.where((rank == i) & has, pick, top_idx)
            top_x = tl.where((rank == i) & has, tl.max(tl.where(chosen, x, float("-inf")), axis=0), top_x)
        n_have = tl.sum((top_idx >= 0).to(tl.int32), axis=0)
        # the rest are the unlisted ties at the cut, by lowest index (rare: -inf entries, ties past the cap)
        for i in range(0, V, BLOCK):
            if n_have < top_n:
                offs = i + tl.arange(0, BLOCK)
                xs = tl.load(base + offs, mask=offs < V, other=0.0).to(tl.float32)
                sel = (offs < V) & (sortable_key(xs) == tie)
                pos = n_have + tl.cumsum(sel.to(tl.int32), axis=0) - 1
                sel = sel & (pos < top_n)
                for q in range(0, N_P2):  # each chosen entry to its rank
                    hit = sel & (pos == q)
                    if tl.max(hit.to(tl.int32), axis=0) > 0:
                        top_idx = tl.where(rank == q, tl.min(tl.where(hit, offs, 2147483647), axis=0), top_idx)
                        top_x = tl.where(rank == q, tl.max(tl.where(hit, xs, float("-inf")), axis=0), top_x)
                n_have += tl.sum(sel.to(tl.int32), axis=0)
        on = rank < top_n
        tl.store(ids_ptr + row * top_n + rank, top_idx.to(tl.int64), mask=on)
        tl.store(top_ptr + row * top_n + rank, top_x - lse, mask=on)


def _check(logits: torch.Tensor, tokens: torch.Tensor, top_n: int) -> None:
    check(logits.dim() == 3, f"logits must be [B, R, V], got shape {tuple(logits.shape)}")
    check(logits.dtype in LOGIT_DTYPES, f"logits dtype {logits.dtype} not supported; use float32, float16 or bfloat16")
    check(logits.stride(-1) == 1 or logits.shape[-1] == 1, "logits must have unit stride along V")
    B, R, V = logits.shape
    check(V >= 1, f"logits needs V >= 1, got {tuple(logits.shape)}")
    check(tokens.shape == (B, R), f"tokens must be [B={B}, R={R}], got {tuple(tokens.shape)}")
    check(tokens.dtype in INDEX_DTYPES, f"tokens must be int32 or int64, got {tokens.dtype}")
    check(tokens.device == logits.device, f"tokens is on {tokens.device}, logits on {logits.device}")
    check(
        isinstance(top_n, int) and not isinstance(top_n, bool) and 0 <= top_n <= min(TOP_N_MAX, V),
        f"top_n must be an int in 0..{min(TOP_N_MAX, V)} (at most {TOP_N_MAX} and the vocabulary), got {top_n!r}",
    )


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, top_n: int) -> LogprobsOutput:
    """Log-probabilities of ``tokens`` under ``logits`` and each row's ``top_n`` most probable tokens.

    Parameters
    ----------
    logits:
        Shape: ``(B, R, V)``; float32/float16/bfloat16; unit stride along V (any stride along B and R).
    tokens:
        Shape: ``(B, R)``; int32/int64; ``-1`` (or any id outside ``[0, V)``): none (its score is token 0's).
    top_n:
        Alternatives per row, ``0..20`` (and at most ``V``).

    Returns
    -------
    LogprobsOutput
        ``logprobs (B, R)`` float32, ``top_ids (B, R, top_n)`` int64, ``top_logprobs (B, R, top_n)`` float32:
        :func:`token_logprobs_ref`'s values (ids exact; scores up to the float64 sum's order).

    Notes
    -----
    Launches: 3 without alternatives, 4 with. CUDA graph: safe to capture (fixed shapes, no host sync).
    """
    _check(logits, tokens, top_n)
    if not use_triton(logits):
        return token_logprobs_ref(logits, tokens, top_n)
    B, R, V = logits.shape
    dev, rows = logits.device, B * R
    res = LogprobsOutput(
        torch.empty((B, R), dtype=torch.float32, device=dev),
        torch.empty((B, R, top_n), dtype=torch.int64, device=dev),
        torch.empty((B, R, top_n), dtype=torch.float32, device=dev),
    )
    if rows == 0:
        return res
    n_splits, split = split_layout(rows, V)
    ns_p2 = next_pow2(n_splits)
    per_split = MAXIMA_PER_ROW // ns_p2
    top = top_n > 0
    keys = torch.empty((rows, n_splits), dtype=torch.int32, device=dev)
    sums = torch.empty((rows, n_splits), dtype=torch.float64, device=dev)
    maxima = torch.empty((rows, n_splits, per_split) if top else (1,), dtype=torch.int32, device=dev)
    bound = torch.empty(rows if top else 1, dtype=torch.int32, device=dev)
    listed = torch.empty((rows, n_splits, GATHER_CAP) if top else (1,), dtype=torch.int32, device=dev)
    counts = torch.empty((rows, n_splits) if top else (1,), dtype=torch.int32, device=dev)
    head = (logits, logits.stride(0), logits.stride(1))
    grid = (rows, n_splits)
    sizes = dict(SPLIT=split, BLOCK=PASS_BLOCK, num_warps=PASS_WARPS)
    _maxima_kernel[grid](*head, keys, maxima, V, R, n_splits, M=per_split, TOP=top, **sizes)
    if top:
        _bound_kernel[(rows,)](maxima, bound, top_n, n_splits, MAXIMA=per_split * ns_p2, M=per_split, num_warps=8)
    _sum_list_kernel[grid](*head, keys, bound, sums, listed, counts, V, R, n_splits, NS_P2=ns_p2, TOP=top,
                           GCAP=GATHER_CAP, **sizes)  # fmt: skip
    _finish_kernel[(rows,)](
        *head, tokens, tokens.stride(0), tokens.stride(1), keys, bound, sums, listed, counts, *res, V, R, n_splits,
        top_n, SPLIT=split, BLOCK=PASS_BLOCK, NS_P2=ns_p2, N_P2=next_pow2(top_n), TOP=top, GCAP=GATHER_CAP,
        num_warps=FINISH_WARPS,
    )  # fmt: skip
    return res
