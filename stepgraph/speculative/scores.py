"""Log-probabilities of the emitted tokens, and the top alternatives, as the OpenAI API defines them: under
the target's raw distribution (``log_softmax`` of its logits, before temperature or filters), in float32.

Computed inside the step graph (fixed shapes, no host sync) for accepted drafts and the bonus or
correction alike, and eagerly for the prefill's first token; each request keeps the ones of the tokens
it takes (:class:`~stepgraph.speculative.requests.Request`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: the most alternatives a position reports (the OpenAI API's ``top_logprobs`` limit)
TOP_LOGPROBS_MAX = 20


@dataclass
class Scores:
    """``logprobs [B, R]``: each token's log-probability (rows whose token is -1 hold a number of no
    meaning); ``top_ids [B, R, n]`` and ``top_logprobs [B, R, n]``: the ``n`` most probable tokens of each
    row and theirs, most probable first."""

    logprobs: torch.Tensor
    top_ids: torch.Tensor
    top_logprobs: torch.Tensor


def check_top_logprobs(n: int | None) -> int | None:
    """``None`` (no log-probabilities) or ``0 <= n <= 20`` alternatives per token."""
    if n is None:
        return None
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= TOP_LOGPROBS_MAX:
        raise ValueError(
            f"logprobs must be None or the number of alternatives per token, 0..{TOP_LOGPROBS_MAX}; got {n!r}"
        )
    return n


def token_scores(logits: torch.Tensor, tokens: torch.Tensor, top_n: int) -> Scores:
    """Scores of ``tokens [B, R]`` (-1: none) under ``logits [B, R, V]`` (any float dtype), and the
    ``top_n`` alternatives of each row. Graph-safe. Cost: about three passes over the logits in float32."""
    x = logits.float()
    lse = torch.logsumexp(x, -1, keepdim=True)  # [B, R, 1]
    chosen = x.gather(-1, tokens.clamp_min(0)[..., None]) - lse
    if top_n:
        values, ids = torch.topk(x, top_n, dim=-1)
        top = values - lse
    else:
        ids = torch.empty((*tokens.shape, 0), dtype=torch.int64, device=x.device)
        top = torch.empty((*tokens.shape, 0), dtype=torch.float32, device=x.device)
    return Scores(chosen[..., 0], ids, top)
