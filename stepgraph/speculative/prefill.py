"""Prefill: the target over a prompt, the first token, and the draft over the prompt, which leave a
request's relay slot ready for its first chain step.

A whole prompt goes through eagerly in one forward of each model. With ``chunks`` (a
:class:`~stepgraph.speculative.chunk_forward.ChunkForward`) prompts go through in chunks, several
requests' at once, so that the decode loop can run steps between them: a chunk's forwards attend to the
chunks before it in the cache, and the draft's first position of a chunk takes the target's hidden state
from the chunk before; the forward that ends a prompt also samples its first token and runs the draft
over it. Either way the host then writes the request's relay slot from the device, and the first token
comes to the host in a copy queued behind the forward (:class:`FirstTokens`): a whole prompt's is read at
once, a chunked one's by the loop after the request's first step, so that no step waits on the host for
a chunk forward to end.
"""

from __future__ import annotations

import numpy
import torch

from stepgraph.sampling import REQUEST_FIELDS, Sampling
from stepgraph.speculative.chunk_forward import ChunkForward, first_tokens
from stepgraph.speculative.penalties import PenaltyState, draft_penalties
from stepgraph.speculative.relay import RelayState
from stepgraph.speculative.requests import Request
from stepgraph.speculative.scores import Scores, processed_scores, token_scores
from stepgraph.speculative.step import Draft, Target


class Prefill:
    """Runs a request's prompt through both models into its cache row and relay slot.

    ``kernels``: sample the first token with stepgraph's sampling kernel (the
    ``two_launch_sampling`` piece), else with its torch reference; ``dependent``: its launches programmatic
    dependents (the ``dependent_launch`` piece). ``logprobs``: ``None``, or the
    alternatives per token to score the first token with, under ``logprobs_mode``
    (:mod:`stepgraph.speculative.scores`), through its kernels with ``logprob_kernels`` (the
    ``fused_logprobs`` piece).
    ``chunks``: the batched chunk forward (``None``: each prompt whole, in one forward), which scores
    prompts when ``prompt_logprobs`` is set (its own setting).
    ``prompt_logprobs``: ``None``, or the alternatives per position to score each prompt token with
    (raw logits; :attr:`Request.prompt_logprobs`).
    ``penalties``: the requests' penalty state (:mod:`stepgraph.speculative.penalties`): a prompt's tokens
    go in when its prefill starts, its first token is sampled from penalised logits and recorded, and its
    first draft is taken from the draft's logits penalised with the prompt and that token.
    """

    def __init__(
        self,
        target: Target,
        draft: Draft,
        relay: RelayState,
        device: torch.device,
        *,
        kernels: bool,
        dependent: bool = True,
        logprobs: int | None = None,
        logprob_kernels: bool = True,
        chunks: ChunkForward | None = None,
        penalties: PenaltyState | None = None,
        logprobs_mode: str = "raw",
        prompt_logprobs: int | None = None,
    ) -> None:
        self.target, self.draft, self.relay, self.device = target, draft, relay, device
        self.prompt_logprobs = prompt_logprobs
        self.logprobs_mode = logprobs_mode
        self.kernels, self.logprobs, self.chunks, self.penalties = kernels, logprobs, chunks, penalties
        self.dependent = dependent
        self.draft_penalties = draft_penalties(penalties, draft)
        self.logprob_kernels = logprob_kernels
        if penalties is not None:  # the whole-prompt path's slot and last position, filled per request
            self._slot, self._last, self._zero = (torch.zeros(1, dtype=torch.int64, device=device) for _ in range(3))
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
        if self.prompt_logprobs is not None:  # each position's next prompt token (none after the last)
            chosen = torch.tensor([r.prompt[1:] + [-1]], dtype=torch.int64, device=dev)
            r.start_prompt_scores()
            scores = token_scores(logits, chosen, self.prompt_logprobs, kernels=self.logprob_kernels)
            r.prompt_pending.append((PromptScores(scores), 0, L - 1))  # taken with the first token
        p = r.params
        end = logits[:, -1]
        if self.penalties is not None:
            self.penalties.admit(r.slot, p, L, r.eos)
            self._slot.fill_(r.slot)
            self._last.fill_(L - 1)
            self.penalties.write_prompt(tokens, self._slot, self._zero, self._last + 1)
            # the first token from penalised logits; its scores stay the raw logits'
            end = self.penalties.apply(end[:, None], self._slot[:, None][:, :0], self._slot, self._last)[:, 0]
        values = {}  # the request's sampling settings on the device, for a sampled first token only
        if p.sampling is not Sampling.GREEDY:
            values = {
                n: torch.tensor([v], dtype=REQUEST_FIELDS[n][0], device=dev) for n, v in p.request_values().items()
            }
        offset = torch.zeros(1, dtype=torch.int64, device=dev)
        first = first_tokens(end, values, offset, p.sampling, self.kernels, self.dependent)  # [1]
        d_tokens = torch.cat([tokens, first[:, None]], 1)
        d_hidden = torch.cat([torch.zeros_like(hidden[:, :1]), hidden], 1)
        d_logits, d_hid = self.draft(d_tokens, torch.arange(L + 1, device=dev)[None, :], d_hidden, rows)
        d_end = d_logits[:, -1:]
        if self.draft_penalties is not None:  # the first draft follows the first token: row 1 of a chain
            d_end = self.draft_penalties.apply(d_end, first[:, None], self._slot, self._last, 1)
        ready = {"first": first, "offset": offset, "draft": torch.argmax(d_end[:, 0], -1)}
        out = {**ready, "draft_hidden": d_hid[:, -1], "logits": logits[:, -1], "scored": end}
        first_token = self._ready([r], [0], out).get(0)  # (waits for the forwards)
        if self.prompt_logprobs is not None:  # taken here: no wait between the target's forward and the draft's
            r.take_prompt_scores()
        return first_token

    def next_chunks(self, rs: list[Request]) -> list[tuple[FirstTokens, int] | None]:
        """A chunk of each of ``rs``'s prompts, in one forward of each model (``len(rs)`` one of the chunk
        forward's sizes); for each request whose prompt is then done, where its first token will be on the
        host (``(first tokens, row)``: nothing waits for the forward here), else ``None``."""
        width = self.chunks.width(len(rs))
        spans, done = [], []
        for i, r in enumerate(rs):
            a, L = r.prefilled, len(r.prompt)
            if a == 0 and self.penalties is not None:
                # the chunk forwards write the prompt
                self.penalties.admit(r.slot, r.params, L, r.eos)
            if a == 0 and self.prompt_logprobs is not None:
                r.start_prompt_scores()
            b = min(a + width, L)
            spans.append((r.prompt[a:b], a, r.cache_row, r.prompt[b] if b < L else -1, r.params, r.slot))
            if b == L:
                done.append(i)
        before = self.chunks.zero_before(len(rs))
        for i, r in enumerate(rs):
            if r.prefill_carry is not None:  # the target's hidden state at the chunk's first position - 1
                before[i] = r.prefill_carry
        sampling = Sampling.most_general(rs[i].params.sampling for i in done)
        out = self.chunks(spans, before, sampling)
        hidden = out["hidden"]
        scores = None
        if self.prompt_logprobs is not None:  # read with the first token, after the request's first step
            scores = PromptScores(Scores(out["prompt_logprobs"], out["prompt_top_ids"], out["prompt_top_logprobs"]))
        for i, (r, span) in enumerate(zip(rs, spans)):
            if scores is not None:
                r.prompt_pending.append((scores, i, len(span[0]) - (span[3] < 0)))
            r.prefilled += len(span[0])
            r.prefill_carry = hidden[i].clone() if r.prefilled < len(r.prompt) else None
        results: list[tuple[FirstTokens, int] | None] = [None] * len(rs)
        if done:
            first = self._ready([rs[i] for i in done], done, out)
            for i in done:
                results[i] = (first, i)
        return results

    def _ready(self, rs: list[Request], at: list[int], out) -> FirstTokens:
        """Write the relay slots of ``rs`` (prompts done) from rows ``at`` of a prefill's ``out`` (``first``,
        ``offset``, ``draft`` ``[n]``, ``draft_hidden [n, Dd]``, ``logits [n, V]`` and ``scored [n, V]``:
        the first token, its stream offset after it, the first draft, the prompt's last logits, raw and
        as the first token was drawn from them); returns their first tokens and scores (with ``logprobs``)
        on their way to the host, by row of ``out``."""
        first = out["first"]
        for r, i in zip(rs, at):
            if self.penalties is not None:
                self.penalties.record_first(r.slot, len(r.prompt), first[i : i + 1])
            self.relay.write(
                r.slot,
                token=first[i],
                draft=out["draft"][i],
                seq_len=len(r.prompt),
                cache_row=r.cache_row,
                hidden=out["draft_hidden"][i],
                offset=out["offset"][i],
                **r.params.request_values(),
            )
        sc = None
        if self.logprobs is not None:
            chosen = torch.stack([first[i] for i in at])[:, None]
            if self.logprobs_mode == "raw":
                logits = torch.stack([out["logits"][i] for i in at])[:, None]  # no host-to-device index copy
                sc = token_scores(logits, chosen, self.logprobs, kernels=self.logprob_kernels)
            else:  # as the first token was drawn: penalised, each request's temperature and kept set
                scored = torch.stack([out["scored"][i] for i in at])[:, None]
                values = [r.params.request_values() for r in rs]
                settings = [
                    torch.tensor([v[n] for v in values], dtype=REQUEST_FIELDS[n][0], device=self.device)
                    for n in ("temperature", "top_k", "top_p", "min_p")
                ]
                sc = processed_scores(scored, chosen, self.logprobs, *settings, kernels=self.logprob_kernels)
        return FirstTokens(first, sc, at)


class FirstTokens:
    """The first tokens of the prompts one prefill finished, and their scores, copied to the host behind
    the forward that made them: a loop launches its next step first and reads them after it.

    ``first [n]``: the forward's first tokens by row; ``scores``: ``None``, or the scores of rows ``at``
    (``[len(at), 1]``, ``[len(at), 1, k]`` each), in that order."""

    def __init__(self, first: torch.Tensor, scores: Scores | None, at: list[int]) -> None:
        values = {"first": first}
        if scores is not None:
            values.update(logprobs=scores.logprobs, top_ids=scores.top_ids, top_logprobs=scores.top_logprobs)
        self._host = HostCopy(values)
        self._scored = {i: j for j, i in enumerate(at)} if scores is not None else None

    def get(self, row: int) -> tuple[int, tuple | None]:
        """Row ``row``'s first token and its scores as :meth:`Request.append` takes them (host arrays;
        ``None`` without scores); the first call waits for the copies."""
        arrays = self._host.arrays()
        first = int(arrays["first"][row])
        if self._scored is None:
            return first, None
        j = self._scored[row]
        return first, tuple(arrays[n][j] for n in ("logprobs", "top_ids", "top_logprobs"))


class PromptScores:
    """A prefill forward's prompt scores (``prompt_logprobs``) on their way to the host, as
    :class:`FirstTokens`: row ``i``'s position ``j`` holds the log-probability of the prompt token after it
    (``logprobs [n, w]``) and the most probable alternatives there (``top_ids``, ``top_logprobs [n, w, k]``)."""

    def __init__(self, scores: Scores) -> None:
        self._host = HostCopy({"logprobs": scores.logprobs, "ids": scores.top_ids, "top": scores.top_logprobs})

    def get(self, row: int, count: int) -> tuple:
        """Row ``row``'s first ``count`` positions as host arrays (views that nothing writes again): their
        log-probabilities ``[count]``, and the alternatives' ids and log-probabilities ``[count, k]``; the
        first call waits for the copies."""
        arrays = self._host.arrays()
        return tuple(arrays[n][row, :count] for n in ("logprobs", "ids", "top"))


class HostCopy:
    """Device tensors copied to pinned host memory behind the work queued so far (on a CPU: cloned, as
    they are views that the forward's next call overwrites); :meth:`lists` waits for the copies."""

    def __init__(self, values: dict[str, torch.Tensor]) -> None:
        self._event = None
        if next(iter(values.values())).is_cuda:
            host = {n: torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for n, t in values.items()}
            for n, t in values.items():
                host[n].copy_(t, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record()
            values = host
        else:
            values = {n: t.clone() for n, t in values.items()}
        self._values, self._arrays = values, None

    def arrays(self) -> dict[str, numpy.ndarray]:
        """The values as host arrays (views of the copies; the first call waits for them)."""
        if self._arrays is None:
            if self._event is not None:
                self._event.synchronize()
            self._arrays = {n: v.numpy() for n, v in self._values.items()}
        return self._arrays
