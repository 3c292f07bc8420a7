"""Prompt chunks of several requests in one forward of both models, captured as one graph per key.

Chunked prefill (``SpecDecoder(prefill_chunk=C)``) runs a budget of ``C`` prompt positions between two
steps. Run one forward per request and eagerly, a model of a few dozen layers costs a few milliseconds
of kernel launches per chunk whatever its length, so the step after several arrivals waited for all of
them (on the H200, a step p99 of six times its p50). Here the budget is one forward of ``C`` positions:
``n`` requests' chunks of up to ``C // n`` positions each, an ``[n, C // n]`` batch, with ``n`` a power
of two up to ``MAX_CHUNKS`` (the largest that the requests being prefilled fill). The forward is a
:class:`~stepgraph.runner.StepGraphRunner` step keyed by ``n`` and the sampling class of the prompts it
finishes: one graph each (captured, memory checked, reported and switched like the chain step's keys;
eager where graphs are off).

In the graph, for each row (a chunk of ``L`` positions from ``start``):

* the target over the chunk, writing its keys and values;
* the first token from the target's logits at the chunk's last position, greedy or sampled from the
  request's stream (the rows whose prompt this chunk finishes; the others' is never used);
* the draft over the chunk and one position more, its position ``p`` fed the target's hidden state at
  ``p - 1`` (``before``: the one from the chunk before, or zeros). The position after the chunk holds
  the first token where the prompt is done, else the prompt's next token (the next chunk writes that
  position again, with the same inputs). Its draft logits and feature are the request's first draft.

Padding: a row's positions past its chunk continue its own positions (clamped to the cache's last), so
they write slots of that request that a later forward writes before any reads them, and see real keys
(no row of the attention is empty). Padded batch rows are the scratch row at position 0.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from stepgraph.buffers import Buffer
from stepgraph.config import RunnerConfig
from stepgraph.kernels.chain_sampling import chain_verify_sampling, chain_verify_sampling_ref
from stepgraph.runner import StepGraphRunner
from stepgraph.sampling import REQUEST_FIELDS, Sampling, sampling_class
from stepgraph.speculative.penalties import PenaltyState, draft_penalties
from stepgraph.speculative.scores import next_tokens, token_scores
from stepgraph.speculative.step import Draft, Target

MAX_CHUNKS = 8  # requests' chunks in one forward at most
GREEDY_ROW = {name: default for name, (_, default) in REQUEST_FIELDS.items()}  # a row whose first token is unused


class ChunkForward:
    """``n`` chunks of ``chunk // n`` positions at most through the target and the draft in one forward,
    with the first token and the first draft of the prompts they finish.

    Parameters
    ----------
    target, draft:
        The models (:class:`~stepgraph.speculative.step.Target`, :class:`~stepgraph.speculative.step.Draft`).
    chunk:
        Positions per forward (C): ``n`` rows of ``C // n``.
    max_chunks:
        The most requests that can be prefilled at once (the decoder's ``max_batch``): no forward of more
        chunks is made, captured or warmed up.
    hidden_size, hidden_dtype:
        The target's hidden state (its width, and its dtype as the draft takes it): what a chunk carries to
        the next one's first draft position.
    scratch_row, max_seq_len:
        The cache row of padded batch rows, and the positions of a cache row.
    kernels, dependent:
        Sample first tokens with stepgraph's sampling kernel (else its torch reference), its launches
        programmatic dependents with ``dependent`` (the ``dependent_launch`` piece).
    config:
        The runner's settings; its buckets are the numbers of chunks (``STEPGRAPH_PREFILL_GRAPH=0``: eager).
    agree:
        The ranks' capture vote (tensor parallelism), as for the chain step.
    penalties:
        The requests' penalty state: each chunk's tokens go into it, and a finished prompt's first token
        is sampled from its last logits penalised with its prompt (:mod:`stepgraph.speculative.penalties`),
        and its first draft from the draft's logits penalised with the prompt and that token.
    prompt_logprobs, logprob_kernels:
        ``None``, or the alternatives per position: each chunk position's next prompt token scored under
        its raw logits in the forward (:func:`~stepgraph.speculative.scores.next_tokens`), through the
        fused log-probability kernels with ``logprob_kernels``.
    """

    def __init__(
        self,
        target: Target,
        draft: Draft,
        *,
        chunk: int,
        max_chunks: int = MAX_CHUNKS,
        hidden_size: int,
        hidden_dtype: torch.dtype,
        scratch_row: int,
        max_seq_len: int,
        device: torch.device,
        kernels: bool = True,
        dependent: bool = True,
        config: RunnerConfig | None = None,
        agree=None,
        penalties: PenaltyState | None = None,
        prompt_logprobs: int | None = None,
        logprob_kernels: bool = True,
    ) -> None:
        self.target, self.draft, self.chunk, self.max_seq_len = target, draft, chunk, max_seq_len
        self.prompt_logprobs, self.logprob_kernels = prompt_logprobs, logprob_kernels
        self.penalties, self.draft_penalties = penalties, draft_penalties(penalties, draft)
        self.device, self.hidden_size, self.hidden_dtype, self.kernels = device, hidden_size, hidden_dtype, kernels
        self.dependent = dependent
        self._offsets = torch.arange(chunk + 1, device=device)
        self.sizes = tuple(n for n in (1, 2, 4, 8, 16) if n <= min(MAX_CHUNKS, max_chunks, chunk))
        max_batch = self.sizes[-1]
        config = dataclasses.replace(config or RunnerConfig(), buckets=self.sizes)
        if not config.toggles.prefill_graph:  # STEPGRAPH_PREFILL_GRAPH=0: the same forward, eagerly
            config = dataclasses.replace(config, toggles=dataclasses.replace(config.toggles, step_graph=False))
        buffers = {
            "tokens": Buffer((max_batch, chunk), torch.int64),
            "start": Buffer((max_batch,), torch.int64),  # the chunk's first position
            "last": Buffer((max_batch,), torch.int64),  # its last position's index in the row
            "extra": Buffer((max_batch,), torch.int64),  # the prompt's next token; -1: the prompt is done
            "rows": Buffer((max_batch,), torch.int64, pad=scratch_row),
            "slots": Buffer((max_batch,), torch.int64, pad=-1),  # the requests' relay slots (for penalties)
            "before": Buffer((max_batch, hidden_size), hidden_dtype),
            **{name: Buffer((max_batch,), dtype, pad=pad) for name, (dtype, pad) in REQUEST_FIELDS.items()},
        }
        self.runner = StepGraphRunner(
            self._forward, buffers, device=device, config=config, agree=agree, name="prefill chunks"
        )

    def width(self, n: int) -> int:
        """Positions per chunk in a forward of ``n`` chunks."""
        return self.chunk // n

    def pack(self, waiting: int) -> int:
        """How many of ``waiting`` requests' chunks go in the next forward: the most a size holds."""
        return max(n for n in self.sizes if n <= waiting)

    def zero_before(self, n: int) -> torch.Tensor:
        """``before [n, D]`` of zeros, for chunks that start their prompts."""
        return torch.zeros((n, self.hidden_size), dtype=self.hidden_dtype, device=self.device)

    def _forward(self, buf, batch: int, sampling: Sampling) -> dict[str, torch.Tensor]:
        w = self.width(batch)
        tokens, rows, last = buf["tokens"][:, :w], buf["rows"], buf["last"]
        positions = (buf["start"][:, None] + self._offsets[None, : w + 1]).clamp(max=self.max_seq_len - 1)
        logits, hidden = self.target(tokens, positions[:, :w], rows)
        at = torch.arange(batch, device=tokens.device)
        end_logits, end_hidden = logits[at, last], hidden[at, last]  # [n, V], [n, D]
        offset = torch.zeros_like(buf["seed"])
        sampled = end_logits
        if self.penalties is not None:  # penalised with the prompt; the scores stay the raw logits'
            slots = buf["slots"]
            self.penalties.write_prompt(tokens, slots, buf["start"], last + 1)
            sampled = self.penalties.apply(end_logits[:, None], slots[:, None][:, :0], slots, buf["start"] + last)[:, 0]
        first = first_tokens(sampled, buf, offset, sampling, self.kernels, self.dependent)
        extra = buf["extra"]
        d_tokens = torch.cat([tokens, torch.zeros_like(tokens[:, :1])], 1)
        d_tokens[at, last + 1] = torch.where(extra >= 0, extra, first)  # the position after the chunk
        before = buf["before"][:, None].to(hidden.dtype)
        d_logits, d_hidden = self.draft(d_tokens, positions, torch.cat([before, hidden], 1), rows)
        d_end = d_logits[at, last + 1][:, None]  # [n, 1, V]
        if self.draft_penalties is not None:  # the first draft follows the first token: row 1 of a chain
            d_end = self.draft_penalties.apply(d_end, first[:, None], buf["slots"], buf["start"] + last, 1)
        out = {
            "first": first,
            "offset": offset,
            "draft": torch.argmax(d_end[:, 0], -1),
            "draft_hidden": d_hidden[at, last + 1],
            "hidden": end_hidden,
            "logits": end_logits,
            "scored": sampled,
        }
        if self.prompt_logprobs is not None:  # each position's next prompt token, under the raw logits
            chosen = next_tokens(tokens, last, extra)
            sc = token_scores(logits, chosen, self.prompt_logprobs, kernels=self.logprob_kernels)
            out.update(prompt_logprobs=sc.logprobs, prompt_top_ids=sc.top_ids, prompt_top_logprobs=sc.top_logprobs)
        return out

    def __call__(self, spans, before: torch.Tensor, sampling: Sampling):
        """``spans``: per row ``(tokens, start, cache_row, next_token, params, slot)``: a chunk's prompt tokens
        (a list of at most ``width(len(spans))`` ints; ``len(spans)`` one of :attr:`sizes`), its first
        position, the prompt's token after it (``-1``: the chunk ends the prompt), the request's
        :class:`~stepgraph.sampling.SamplingParams` (used where the chunk ends the prompt) and its relay slot.
        ``before [n, D]``: the target's hidden state at each chunk's ``start - 1`` (zeros for a first
        chunk). ``sampling``: the most general class of the prompts the forward finishes.

        Returns ``first [n]``, ``offset [n]``, ``draft [n]``, ``draft_hidden [n, Dd]`` (a finished
        prompt's first token, its stream offset after it, and its first draft) and ``hidden [n, D]``,
        ``logits [n, V]`` and ``scored [n, V]`` (penalised, as the first token was drawn) at each chunk's
        last position, and with ``prompt_logprobs`` the scores of each position's next prompt token
        (``prompt_logprobs [n, w]``, ``prompt_top_ids`` and ``prompt_top_logprobs [n, w, k]``; views valid
        until the next call)."""
        C = self.chunk
        tokens = torch.tensor([s[0] + [0] * (C - len(s[0])) for s in spans], dtype=torch.int64)
        values = [p.request_values() if nxt < 0 else GREEDY_ROW for _, _, _, nxt, p, _ in spans]
        inputs = {
            "tokens": tokens,
            "start": torch.tensor([s[1] for s in spans], dtype=torch.int64),
            "last": torch.tensor([len(s[0]) - 1 for s in spans], dtype=torch.int64),
            "extra": torch.tensor([s[3] for s in spans], dtype=torch.int64),
            "rows": torch.tensor([s[2] for s in spans], dtype=torch.int64),
            "slots": torch.tensor([s[5] for s in spans], dtype=torch.int64),
            "before": before,
            **{
                name: torch.tensor([v[name] for v in values], dtype=dtype)
                for name, (dtype, _) in REQUEST_FIELDS.items()
            },
        }
        return self.runner.run(inputs, sampling)


def first_tokens(
    logits: torch.Tensor, values, offset: torch.Tensor, sampling: Sampling, kernels: bool, dependent: bool = True
) -> torch.Tensor:
    """The first token ``[n]`` of prompts from their last logits ``[n, V]``: greedy, or sampled like a verify
    with no drafts from each request's stream, by stepgraph's kernel with ``kernels`` (its launches
    programmatic dependents with ``dependent``). ``values``: the requests' ``temperature``, ``top_k``,
    ``top_p``, ``min_p`` and ``seed`` ``[n]`` on the device; ``offset [n]`` is advanced past the draw."""
    if sampling is Sampling.GREEDY:
        return torch.argmax(logits, -1)
    sample = functools.partial(chain_verify_sampling, dependent=dependent) if kernels else chain_verify_sampling_ref
    out = sample(
        logits[:, None],
        torch.zeros((logits.shape[0], 0), dtype=torch.int64, device=logits.device),
        values["temperature"],
        values["top_k"],
        values["top_p"],
        values["seed"],
        offset,
        min_p=values["min_p"],
        **sampling_class(sampling).kernel,
    )
    return out.bonus
