"""Prefill (eager): the target over a prompt, the first token, and the draft over the prompt, which
leave a request's relay slot ready for its first chain step.

With ``chunk`` the prompt goes through in pieces of that many positions (the last one shorter), so that
the decode loop can run steps between them: a chunk's forwards attend to the chunks before it in the
cache, and the draft's first position of a chunk takes the target's hidden state from the chunk before.
Where a chunk ends depends on the prompt and ``chunk`` alone, never on the requests around it.
"""

from __future__ import annotations

import torch

from stepgraph.kernels.chain_sampling import chain_verify_sampling, chain_verify_sampling_ref
from stepgraph.sampling import Sampling, SamplingParams, sampling_class
from stepgraph.speculative.relay import RelayState
from stepgraph.speculative.requests import Request
from stepgraph.speculative.scores import token_scores
from stepgraph.speculative.step import Draft, Target


class Prefill:
    """Runs a request's prompt through both models into its cache row and relay slot.

    ``kernels``: sample the first token with stepgraph's sampling kernel (the
    ``two_launch_sampling`` piece), else with its torch reference. ``logprobs``: ``None``, or the
    alternatives per token to score the first token with (:mod:`stepgraph.speculative.scores`).
    ``chunk``: positions per forward (``None``: the whole prompt in one).
    """

    def __init__(
        self,
        target: Target,
        draft: Draft,
        relay: RelayState,
        device: torch.device,
        *,
        kernels: bool,
        logprobs: int | None = None,
        chunk: int | None = None,
    ) -> None:
        self.target, self.draft, self.relay, self.device = target, draft, relay, device
        self.kernels, self.logprobs, self.chunk = kernels, logprobs, chunk

    def __call__(self, r: Request) -> tuple[int, tuple | None]:
        """Fill ``r``'s cache row and relay slot (``r`` holds both); returns its first token and, with
        ``logprobs``, that token's scores as :meth:`Request.append` takes them."""
        while (done := self.next_chunk(r)) is None:
            pass
        return done

    def chunk_len(self, r: Request) -> int:
        """The positions of ``r``'s next chunk."""
        left = len(r.prompt) - r.prefilled
        return left if self.chunk is None else min(self.chunk, left)

    def next_chunk(self, r: Request) -> tuple[int, tuple | None] | None:
        """One chunk of ``r``'s prompt through both models (all of it without ``chunk``); after the last,
        the first token and its scores as :meth:`__call__` returns them, else ``None``."""
        dev = self.device
        a, L = r.prefilled, len(r.prompt)
        b = a + self.chunk_len(r)
        tokens = torch.tensor([r.prompt[a:b]], dtype=torch.int64, device=dev)
        rows = torch.tensor([r.cache_row], device=dev)
        logits, hidden = self.target(tokens, torch.arange(a, b, device=dev)[None, :], rows)
        before = torch.zeros_like(hidden[:, :1]) if a == 0 else r.prefill_carry  # the target's hidden at a - 1
        d_hidden = torch.cat([before, hidden], 1)
        r.prefilled = b
        if b < L:  # the draft over this chunk; the next one takes the target's last hidden state from here
            self.draft(tokens, torch.arange(a, b, device=dev)[None, :], d_hidden[:, :-1], rows)
            r.prefill_carry = hidden[:, -1:]
            return None
        r.prefill_carry = None
        p = r.params
        seed = torch.tensor([p.seed], dtype=torch.int64, device=dev)
        offset = torch.zeros(1, dtype=torch.int64, device=dev)
        first = self.first_token(logits[:, -1:], p, seed, offset)  # [1]
        d_tokens = torch.cat([tokens, first[:, None]], 1)
        d_logits, d_hid = self.draft(d_tokens, torch.arange(a, L + 1, device=dev)[None, :], d_hidden, rows)
        self.relay.write(
            r.slot,
            token=first[0],
            draft=torch.argmax(d_logits[0, -1]),
            seq_len=L,
            cache_row=r.cache_row,
            hidden=d_hid[0, -1],
            offset=offset[0],
            **p.request_values(),
        )
        scores = None
        if self.logprobs is not None:
            sc = token_scores(logits[:, -1:], first[:, None], self.logprobs)
            scores = (sc.logprobs[0].tolist(), sc.top_ids[0].tolist(), sc.top_logprobs[0].tolist())
        return int(first.item()), scores

    def first_token(
        self, logits: torch.Tensor, p: SamplingParams, seed: torch.Tensor, offset: torch.Tensor
    ) -> torch.Tensor:
        """The first token ``[1]`` from the prompt's last logits ``[1, 1, V]``: greedy, or sampled from the
        request's stream (``seed``, ``offset``) like a verify with no drafts."""
        if p.sampling is Sampling.GREEDY:
            return torch.argmax(logits[:, 0], -1)
        dev = logits.device
        sample = chain_verify_sampling if self.kernels else chain_verify_sampling_ref
        out = sample(
            logits,
            torch.zeros((1, 0), dtype=torch.int64, device=dev),
            torch.tensor([p.temperature], dtype=torch.float32, device=dev),
            torch.tensor([p.top_k], dtype=torch.int64, device=dev),
            torch.tensor([p.top_p], dtype=torch.float32, device=dev),
            seed,
            offset,
            min_p=torch.tensor([p.min_p], dtype=torch.float32, device=dev),
            **sampling_class(p.sampling).kernel,
        )
        return out.bonus
