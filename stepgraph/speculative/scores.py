"""Log-probabilities of the emitted tokens, and the top alternatives, in float32. Two modes:

* ``"raw"`` (the default), as the OpenAI API and vLLM define them: under the target's raw distribution
  (``log_softmax`` of its logits, before penalties, temperature or filters);
* ``"processed"`` (vLLM's ``processed_logprobs``): under the distribution the token was drawn from, that
  is the logits after penalties, over the request's temperature, with its top-k / top-p / min-p kept set
  (:func:`~stepgraph.kernels.chain_sampling_ref.kept_mask`, the sampling kernels' definition)
  renormalised and ``-inf`` outside it. A greedy request's (temperature 0) is the penalised logits'
  ``log_softmax``, as vLLM reports it.

Computed inside the step graph (fixed shapes, no host sync) for accepted drafts and the bonus or
correction alike, and eagerly for the prefill's first token; each request keeps the ones of the tokens
it takes (:class:`~stepgraph.speculative.requests.Request`). A decoder built with ``prompt_logprobs``
also scores each prompt token after the first under the raw logits of the positions before it (vLLM's
``prompt_logprobs``), in the prefill's forwards (:func:`next_tokens`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from stepgraph.kernels.chain_sampling_ref import kept_mask
from stepgraph.kernels.logprobs import TOP_N_MAX, token_logprobs, token_logprobs_ref

#: the most alternatives a position reports (the OpenAI API's ``top_logprobs`` limit)
TOP_LOGPROBS_MAX = TOP_N_MAX
#: what the log-probabilities are taken under (module docstring)
LOGPROBS_MODES = ("raw", "processed")


@dataclass
class Scores:
    """``logprobs [B, R]``: each token's log-probability (rows whose token is -1 hold a number of no
    meaning); ``top_ids [B, R, n]`` and ``top_logprobs [B, R, n]``: the ``n`` most probable tokens of each
    row and theirs, most probable first."""

    logprobs: torch.Tensor
    top_ids: torch.Tensor
    top_logprobs: torch.Tensor


def check_top_logprobs(n: int | None, name: str = "logprobs") -> int | None:
    """``None`` (no log-probabilities) or ``0 <= n <= 20`` alternatives per token (``name``: the setting)."""
    if n is None:
        return None
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= TOP_LOGPROBS_MAX:
        raise ValueError(
            f"{name} must be None or the number of alternatives per token, 0..{TOP_LOGPROBS_MAX}; got {n!r}"
        )
    return n


def next_tokens(tokens: torch.Tensor, last: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """The token after each position of prompt chunks ``tokens [n, w]`` (row ``i``'s positions ``0..last[i]``,
    then padding): the chunk's own next one, ``after[i]`` at ``last[i]`` (``-1``: the prompt ends there), and
    ``-1`` past it; ``[n, w]``, what :func:`token_scores` scores a prompt's positions with. Graph-safe."""
    w = tokens.shape[1]
    cols = torch.arange(w, device=tokens.device)[None, :]
    shifted = torch.cat([tokens[:, 1:], torch.full_like(tokens[:, :1], -1)], 1)
    return torch.where(cols < last[:, None], shifted, torch.where(cols == last[:, None], after[:, None], -1))


def check_logprobs_mode(mode: str) -> str:
    if mode not in LOGPROBS_MODES:
        raise ValueError(
            f"logprobs_mode must be 'raw' or 'processed' (module stepgraph.speculative.scores), got {mode!r}"
        )
    return mode


def processed_scores(
    scored: torch.Tensor,
    tokens: torch.Tensor,
    top_n: int,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    min_p: torch.Tensor,
    *,
    filtered: bool = True,
    kernels: bool = True,
) -> Scores:
    """Scores of ``tokens [B, R]`` in the ``"processed"`` mode: under ``scored [B, R, V]`` (the logits after
    penalties) with each request's ``temperature``, ``top_k``, ``top_p`` and ``min_p`` ``[B]``
    (``filtered=False``: none of them filters, as in the temperature class). Graph-safe. Cost: with
    filters a sort of every row (the kept set), on top of :func:`token_scores` (``kernels`` as there)."""
    B = scored.shape[0]
    t = temperature.float().view(B, 1, 1)
    greedy = t <= 0
    z = scored.float() * (1.0 / torch.where(greedy, torch.ones_like(t), t))
    if not filtered:
        return token_scores(z, tokens, top_n, kernels=kernels)
    kept = kept_mask(scored, temperature, top_k, top_p, min_p) | greedy
    return token_scores(torch.where(kept, z, torch.full_like(z, float("-inf"))), tokens, top_n, kernels=kernels)


def token_scores(logits: torch.Tensor, tokens: torch.Tensor, top_n: int, *, kernels: bool = True) -> Scores:
    """Scores of ``tokens [B, R]`` (-1: none) under ``logits [B, R, V]`` (any float dtype), and the
    ``top_n`` alternatives of each row (ties: the lowest id first). Graph-safe. ``kernels``: through
    :func:`stepgraph.kernels.logprobs.token_logprobs` (the ``fused_logprobs`` piece; two reads of the
    logits), else its torch reference (a float32 copy and a ``topk`` over the vocabulary)."""
    return Scores(*(token_logprobs if kernels else token_logprobs_ref)(logits, tokens, top_n))
