"""Prefill: the target over a prompt, the first token, and the draft over the prompt, which leave a
request's relay slot ready for its first chain step.

A whole prompt goes through eagerly in one forward of each model. With ``chunks`` (a
:class:`~stepgraph.speculative.chunk_forward.ChunkForward`) prompts go through in chunks, several
requests' at once, so that the decode loop can run steps between them: a chunk's forwards attend to the
chunks before it in the cache, and the draft's first position of a chunk takes the target's hidden state
from the chunk before. After a prompt's last chunk, its first token is sampled and the draft run over it
(eagerly, a one-position forward for the requests done together).
"""

from __future__ import annotations

import torch

from stepgraph.kernels.chain_sampling import chain_verify_sampling, chain_verify_sampling_ref
from stepgraph.sampling import Sampling, SamplingParams, sampling_class
from stepgraph.speculative.chunk_forward import ChunkForward
from stepgraph.speculative.relay import RelayState
from stepgraph.speculative.requests import Request
from stepgraph.speculative.scores import token_scores
from stepgraph.speculative.step import Draft, Target


class Prefill:
    """Runs a request's prompt through both models into its cache row and relay slot.

    ``kernels``: sample the first token with stepgraph's sampling kernel (the
    ``two_launch_sampling`` piece), else with its torch reference. ``logprobs``: ``None``, or the
    alternatives per token to score the first token with (:mod:`stepgraph.speculative.scores`).
    ``chunks``: the batched chunk forward (``None``: each prompt whole, in one forward).
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
        chunks: ChunkForward | None = None,
    ) -> None:
        self.target, self.draft, self.relay, self.device = target, draft, relay, device
        self.kernels, self.logprobs, self.chunks = kernels, logprobs, chunks
        self.chunk = None if chunks is None else chunks.chunk  # prompt positions per forward

    def __call__(self, r: Request) -> tuple[int, tuple | None]:
        """Fill ``r``'s cache row and relay slot (``r`` holds both) with one forward of each model over
        its whole prompt; returns its first token and, with ``logprobs``, that token's scores as
        :meth:`Request.append` takes them."""
        dev = self.device
        L = len(r.prompt)
        tokens = torch.tensor([r.prompt], dtype=torch.int64, device=dev)
        rows = torch.tensor([r.cache_row], device=dev)
        logits, hidden = self.target(tokens, torch.arange(L, device=dev)[None, :], rows)
        r.prefilled = L
        d_hidden = torch.cat([torch.zeros_like(hidden[:, :1]), hidden], 1)
        return self._finish([r], logits[:, -1], d_hidden, tokens)[0]

    def next_chunks(self, rs: list[Request]) -> list[tuple[int, tuple | None] | None]:
        """A chunk of each of ``rs``'s prompts, in one forward of each model (``len(rs)`` one of the chunk
        forward's sizes); for each request whose prompt is then done, the first token and its scores as
        :meth:`__call__` returns them, else ``None``."""
        width = self.chunks.width(len(rs))
        spans = [(r.prompt[r.prefilled : r.prefilled + width], r.prefilled, r.cache_row) for r in rs]
        before = self.chunks.zero_before(len(rs))
        for i, r in enumerate(rs):
            if r.prefill_carry is not None:  # the target's hidden state at the chunk's first position - 1
                before[i] = r.prefill_carry
        logits, hidden = self.chunks(spans, before)
        done = []
        for i, (r, (tokens, _, _)) in enumerate(zip(rs, spans)):
            r.prefilled += len(tokens)
            r.prefill_carry = hidden[i].clone() if r.prefilled < len(r.prompt) else None
            if r.prefill_carry is None:
                done.append(i)
        out: list[tuple[int, tuple | None] | None] = [None] * len(rs)
        if done:
            idx = torch.tensor(done, device=self.device)
            last = hidden[idx][:, None]  # the draft's first position after the prompt takes the target's last
            finished = self._finish([rs[i] for i in done], logits[idx], last, None)
            for i, result in zip(done, finished):
                out[i] = result
        return out

    def _finish(self, rs: list[Request], logits: torch.Tensor, d_hidden: torch.Tensor, tokens: torch.Tensor | None):
        """The first token of each of ``rs`` (prompts done) from the prompt's last ``logits [m, V]``, the
        draft over it, and the relay slots written. ``tokens [m, T]``: the prompt positions the draft has
        not run over yet, before the first token (``d_hidden [m, T + 1, D]`` their hidden inputs, the
        first token's last); ``None`` for none (``d_hidden [m, 1, D]``)."""
        dev = self.device
        firsts, offsets, scores = [], [], []
        for i, r in enumerate(rs):
            p = r.params
            seed = torch.tensor([p.seed], dtype=torch.int64, device=dev)
            offset = torch.zeros(1, dtype=torch.int64, device=dev)
            firsts.append(self.first_token(logits[i : i + 1, None], p, seed, offset))  # [1]
            offsets.append(offset)
        first = torch.cat(firsts)  # [m]
        L = torch.tensor([len(r.prompt) for r in rs], device=dev)
        d_tokens = first[:, None] if tokens is None else torch.cat([tokens, first[:, None]], 1)
        T = d_tokens.shape[1]
        positions = L[:, None] - T + 1 + torch.arange(T, device=dev)[None, :]
        rows = torch.tensor([r.cache_row for r in rs], device=dev)
        d_logits, d_hid = self.draft(d_tokens, positions, d_hidden, rows)
        results = []
        for i, r in enumerate(rs):
            self.relay.write(
                r.slot,
                token=first[i],
                draft=torch.argmax(d_logits[i, -1]),
                seq_len=len(r.prompt),
                cache_row=r.cache_row,
                hidden=d_hid[i, -1],
                offset=offsets[i][0],
                **r.params.request_values(),
            )
            scores = None
            if self.logprobs is not None:
                sc = token_scores(logits[i : i + 1, None], first[i : i + 1, None], self.logprobs)
                scores = (sc.logprobs[0].tolist(), sc.top_ids[0].tolist(), sc.top_logprobs[0].tolist())
            results.append(scores)
        return [(t, sc) for t, sc in zip(first.tolist(), results)]

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
