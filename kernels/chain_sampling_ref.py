"""Chain verify sampling in plain torch: the reference the kernels are tested against, the path the
``two_launch_sampling`` piece falls back to, and the sampling distribution ``q`` every path shares
(temperature, top-k keeping ties, top-p by strictly-greater mass; greedy and degenerate rows one-hot).
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class SampledVerifyOutput(NamedTuple):
    """Shapes: ``tokens [B, K+1]`` int64 (accepted drafts, then the correction or bonus, then -1);
    ``num_accepted [B]`` int64; ``bonus [B]`` int64 (the last emitted token); ``extend_tokens [B, K+1]``
    (``tokens`` with the -1 tail replaced by valid ids, the draft-extend input); optional
    ``accept_len``, ``new_seq_lens``, ``select`` as in :class:`GreedyVerifyOutput`."""

    tokens: torch.Tensor
    num_accepted: torch.Tensor
    bonus: torch.Tensor
    extend_tokens: torch.Tensor
    accept_len: torch.Tensor | None = None
    new_seq_lens: torch.Tensor | None = None
    select: torch.Tensor | None = None


def assemble_output(accepted, n, final, offset, seq_lens) -> SampledVerifyOutput:
    """The outputs of a sampled verify from ``accepted [B, K]`` (tokens along the path; only the first
    ``n`` count), ``n [B]`` and ``final [B]`` (correction or bonus). Advances ``offset`` by one."""
    B, K = accepted.shape
    dev = accepted.device
    j = torch.arange(K + 1, device=dev)[None, :]
    padded = torch.cat([accepted.long(), torch.zeros((B, 1), dtype=torch.long, device=dev)], 1)
    tokens = torch.where(j < n[:, None], padded, torch.where(j == n[:, None], final[:, None], -1))
    offset.add_(1)
    return SampledVerifyOutput(
        tokens=tokens,
        num_accepted=n,
        bonus=final,
        extend_tokens=torch.where(j < n[:, None], padded, final[:, None]),
        accept_len=n + 1,
        new_seq_lens=(seq_lens + n + 1).to(seq_lens.dtype) if seq_lens is not None else None,
        select=torch.arange(B, device=dev) * (K + 1) + n,
    )


def _degenerate_rows(logits: torch.Tensor) -> torch.Tensor:
    """Rows (``[..., V]``) that fall back to greedy: any NaN or +inf, or every entry -inf."""
    x = logits.float()
    return torch.isnan(x).any(-1) | (x == float("inf")).any(-1) | (x == float("-inf")).all(-1)


def sampling_probs(
    logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, *, filtered: bool = True
) -> torch.Tensor:
    """The sampling distribution ``q`` of every row, materialised: ``[B, R, V]`` float32 (rows sum to 1).

    Same rule as the kernels (temperature, then top-k keeping ties, then top-p by strictly-greater mass).
    Greedy and degenerate rows come back as a one-hot at the argmax. Graph-safe (no host syncs).
    Cost: a sort of every row when ``filtered``.
    """
    B, R, V = logits.shape
    x = logits.float()
    t = temperature.float().view(B, 1, 1)
    z = x / torch.where(t > 0, t, torch.ones_like(t))
    m = z.amax(-1, keepdim=True)
    e = torch.exp(z - m)
    if filtered:
        vals, order = torch.sort(x, dim=-1, descending=True, stable=True)
        k = top_k.long().view(B, 1, 1)
        k_on = (k > 0) & (k < V)
        kth = vals.gather(-1, (k.clamp(1, V) - 1).expand(B, R, 1))
        keep_k = torch.where(k_on, x >= kth, torch.ones_like(x, dtype=torch.bool))
        e = torch.where(keep_k, e, torch.zeros_like(e))
        e_sorted = e.gather(-1, order)
        before = torch.cumsum(e_sorted, -1) - e_sorted
        starts = torch.ones_like(vals, dtype=torch.bool)
        starts[..., 1:] = vals[..., 1:] != vals[..., :-1]
        arange = torch.arange(V, device=x.device).expand_as(vals)
        first = torch.cummax(torch.where(starts, arange, torch.zeros_like(arange)), -1).values
        mass_gt = before.gather(-1, first)
        total = e.sum(-1, keepdim=True)
        p = top_p.float().view(B, 1, 1)
        keep_sorted = (mass_gt < p * total) | (p >= 1.0)
        keep_p = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        e = torch.where(keep_p, e, torch.zeros_like(e))
    probs = e / e.sum(-1, keepdim=True)
    greedy = (temperature.view(B, 1) <= 0) | _degenerate_rows(logits)
    one_hot = torch.zeros_like(probs).scatter(-1, torch.argmax(logits, -1, keepdim=True), 1.0)
    return torch.where(greedy[..., None], one_hot, probs)


def chain_verify_sampling_ref(
    logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    seed: torch.Tensor,
    offset: torch.Tensor,
    *,
    filtered: bool = True,
    seq_lens: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> SampledVerifyOutput:
    """Plain torch implementation of the same rule (materialised ``q``, torch RNG). Graph-safe.

    Randomness comes from torch's generator (``generator`` or the default one, which a CUDA graph
    advances on every replay), not from ``seed``; ``offset`` is still advanced by one for parity.
    Cost: ``sampling_probs`` (a sort per row when filtered) + O(B*(K+1)*V) elementwise work.
    """
    B, K1, V = logits.shape
    K = K1 - 1
    dev = logits.device
    probs = sampling_probs(logits, temperature, top_k, top_p, filtered=filtered)  # [B, K1, V]
    predict = torch.argmax(logits, -1)
    greedy = (temperature.view(B, 1) <= 0) | _degenerate_rows(logits)  # [B, K1]
    d = draft_tokens.long()
    d_ok = (d >= 0) & (d < V)
    d_safe = torch.where(d_ok, d, torch.zeros_like(d))
    q_d = probs[:, :K].gather(-1, d_safe[..., None]).squeeze(-1)
    coins = torch.rand((B, K1), device=dev, generator=generator)
    accept = d_ok & torch.where(greedy[:, :K], d == predict[:, :K], coins[:, :K] < q_d)
    n = accept.long().cumprod(1).sum(1) if K > 0 else torch.zeros(B, dtype=torch.long, device=dev)
    row = probs.gather(1, n.view(B, 1, 1).expand(B, 1, V)).squeeze(1)  # q_n  [B, V]
    excl = torch.where(n < K, d_safe.gather(1, n.clamp(max=max(K - 1, 0)).view(B, 1)).squeeze(1) if K > 0 else n, -1)
    row = torch.where(torch.arange(V, device=dev)[None, :] == excl[:, None], torch.zeros_like(row), row)
    gumbel = -torch.log(-torch.log(torch.rand((B, V), device=dev, generator=generator)))
    score = torch.where(row > 0, torch.log(row) + gumbel, torch.full_like(row, float("-inf")))
    sample = torch.argmax(score, -1)
    pred_n = predict.gather(1, n.view(B, 1)).squeeze(1)
    use_greedy = greedy.gather(1, n.view(B, 1)).squeeze(1) | ~(row > 0).any(-1)
    final = torch.where(use_greedy, pred_n, sample)
    return assemble_output(d, n, final, offset, seq_lens)
