"""Prompt lookup's proposals (:class:`~stepgraph.drafts.PromptLookupDraft`) as one Triton kernel, with
its torch reference.

For each query (a request's token row ``rows[r]`` and a position ``at`` in it, whose tokens up to ``at``
are known) the proposal is the token after the latest ``j < at`` whose ``n`` tokens ending at ``j`` equal
the ``n`` ending at ``at``, for the longest ``n`` in ``min_ngram..max_ngram`` that matches, else the
query's own token; the output is that proposal's one-hot row of logits.

One program per query walks its row up to ``at`` in blocks (not the row's whole length), keeping one
running maximum of ``n * (L + 1) + j`` over the matches: the longest ``n`` first, then the latest
``j``. It then writes the one-hot row over the vocabulary. The reference builds the same from whole-row
comparisons (``O(T * L * max_ngram)`` per request).
"""

from __future__ import annotations

import torch
import triton.language as tl

from ._common import jit_any_batch, use_triton

ROW_BLOCK = 256
VOCAB_BLOCK = 2048


def lookup(rows: torch.Tensor, at: torch.Tensor, min_ngram: int, max_ngram: int) -> torch.Tensor:
    """For each query ``at[b, t]`` (a position of ``rows [B, L]``): the token after the latest ``j < at``
    whose ``n`` tokens ending at ``j`` equal those ending at ``at``, for the longest ``n`` in
    ``min_ngram..max_ngram`` that matches; ``-1`` where none does. ``[B, T]`` int64."""
    B, L = rows.shape
    j = torch.arange(L, device=rows.device)[None, None, :]
    q = at[..., None]  # [B, T, 1]
    before = j < q
    same = torch.ones((B, *at.shape[1:], L), dtype=torch.bool, device=rows.device)
    best = torch.full(at.shape, -1, dtype=torch.int64, device=rows.device)
    for n in range(1, max_ngram + 1):  # same: tokens j - m == tokens at - m for every m < n
        m = n - 1
        shifted = torch.roll(rows, m, 1)  # shifted[:, j] = rows[:, j - m] (wrapped where j < m: masked)
        suffix = torch.gather(rows, 1, (at - m).clamp(min=0))  # [B, T]
        same &= shifted[:, None, :] == suffix[..., None]
        if n >= min_ngram:  # longer matches overwrite shorter ones
            match = same & before & (j >= m) & (q >= m)
            latest = torch.where(match, j, -1).amax(-1)  # [B, T]
            best = torch.where(latest >= 0, latest, best)
    follows = torch.gather(rows, 1, (best + 1).clamp(max=L - 1))
    return torch.where(best >= 0, follows.to(torch.int64), -1)


def propose_ref(rows, row_ids, at, tokens, min_ngram: int, max_ngram: int, vocab_size: int, dtype) -> torch.Tensor:
    """Reference of :func:`propose` (shapes there)."""
    found = lookup(rows[row_ids], at, min_ngram, max_ngram)
    proposal = torch.where(found >= 0, found, tokens.long()).clamp(0, vocab_size - 1)
    logits = torch.zeros((*at.shape, vocab_size), dtype=dtype, device=at.device)
    return logits.scatter_(2, proposal[..., None], 1.0)


def propose(rows, row_ids, at, tokens, min_ngram: int, max_ngram: int, vocab_size: int, dtype) -> torch.Tensor:
    """One-hot logits ``[B, T, V]`` (``dtype``) of the proposal after each query: row ``rows[row_ids[b]]``
    (``rows [R, L]`` int32, ``row_ids [B]``) at position ``at[b, t]`` (``at [B, T]`` in ``0..L-1``),
    whose token is ``tokens[b, t]`` (the proposal where nothing matches; clamped into the vocabulary).
    Graph-safe; the torch reference off Triton devices."""
    if not use_triton(at):
        return propose_ref(rows, row_ids, at, tokens, min_ngram, max_ngram, vocab_size, dtype)
    B, T = at.shape
    out = torch.empty((B, T, vocab_size), dtype=dtype, device=at.device)
    if B * T == 0:
        return out
    _propose_kernel[(B * T,)](
        rows, row_ids.contiguous(), at.contiguous(), tokens.contiguous(), out, T, rows.shape[1], rows.stride(0),
        vocab_size,
        MIN_N=min_ngram, MAX_N=max_ngram, BLOCK=ROW_BLOCK, VBLOCK=VOCAB_BLOCK, num_warps=4,
    )  # fmt: skip
    return out


@jit_any_batch
def _propose_kernel(
    rows_ptr, row_ids_ptr, at_ptr, tokens_ptr, out_ptr, T, L, row_stride, V,
    MIN_N: tl.constexpr, MAX_N: tl.constexpr, BLOCK: tl.constexpr, VBLOCK: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    b = pid // T
    lanes = tl.arange(0, BLOCK)
    row = rows_ptr + tl.load(row_ids_ptr + b + lanes * 0).to(tl.int64) * row_stride  # vectors: masks stay vectors
    at = tl.load(at_ptr + pid + lanes * 0)
    score = tl.full([BLOCK], -1, tl.int64)  # n * (L + 1) + j of the matches: the longest n, then the latest j
    for start in range(0, tl.max(at), BLOCK):
        j = start + lanes
        same = j < at
        for m in tl.static_range(MAX_N):  # n = m + 1
            here = same & (j >= m) & (at >= m)
            tok = tl.load(row + j - m, mask=here, other=-1)
            suffix = tl.load(row + at - m, mask=at >= m, other=-2)
            same = here & (tok == suffix)
            if m + 1 >= MIN_N:
                score = tl.maximum(score, tl.where(same, (m + 1) * (L + 1) + j.to(tl.int64), -1))
    best = tl.max(score, 0) + lanes * 0  # as a vector: its mask is one
    follows = tl.load(row + best % (L + 1) + 1, mask=best >= 0, other=0)
    own = tl.load(tokens_ptr + pid + lanes * 0)
    proposal = tl.max(tl.where(best >= 0, follows.to(tl.int64), own.to(tl.int64)), 0)
    proposal = tl.minimum(tl.maximum(proposal, 0), V - 1)
    base = out_ptr + pid.to(tl.int64) * V
    for v0 in range(0, V, VBLOCK):
        v = v0 + tl.arange(0, VBLOCK)
        tl.store(base + v, tl.where(v == proposal, 1.0, 0.0).to(out_ptr.dtype.element_ty), mask=v < V)  # not bool->bf16
