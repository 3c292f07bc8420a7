"""Prompt chunks of several requests in one forward of both models, captured as one graph per batch size.

Chunked prefill (``SpecDecoder(prefill_chunk=C)``) runs a budget of ``C`` prompt positions between two
steps. Run one forward per request and eagerly, a model of a few dozen layers costs a few milliseconds
of kernel launches per chunk whatever its length, so the step after several arrivals waited for all of
them (on the H200, a step p99 of six times its p50). Here the budget is one forward of ``C`` positions:
``n`` requests' chunks of up to ``C // n`` positions each, an ``[n, C // n]`` batch, with ``n`` a power
of two up to ``MAX_CHUNKS`` (the largest that the requests being prefilled fill). The forward is a
:class:`~stepgraph.runner.StepGraphRunner` step: one graph per ``n`` (captured, memory checked, reported
and switched like the chain step's keys; eager where graphs are off), each costing about what ``C``
positions cost.

The forward writes the chunk's keys and values and runs the draft over the chunk, its position ``p``
fed the target's hidden state at ``p - 1`` (``before``: the one from the chunk before, or zeros). It
returns, per row, the target's logits and hidden state at the chunk's last position, from which the
caller takes the first token of a prompt that is done, or the next chunk's ``before``.

Padding: a row's positions past its chunk continue its own positions (clamped to the cache's last), so
they write slots of that request that a later forward writes before any reads them, and see real keys
(no row of the attention is empty). Padded batch rows are the scratch row at position 0.
"""

from __future__ import annotations

import dataclasses

import torch

from stepgraph.buffers import Buffer
from stepgraph.config import RunnerConfig
from stepgraph.runner import StepGraphRunner
from stepgraph.speculative.step import Draft, Target

MAX_CHUNKS = 8  # requests' chunks in one forward at most


class ChunkForward:
    """``n`` chunks of at most ``chunk`` positions through the target and the draft in one forward.

    Parameters
    ----------
    target, draft:
        The models (:class:`~stepgraph.speculative.step.Target`, :class:`~stepgraph.speculative.step.Draft`).
    chunk:
        Positions per forward (C): ``n`` rows of ``C // n``.
    hidden_size, hidden_dtype:
        The target's hidden state as the draft takes it.
    scratch_row, max_seq_len:
        The cache row of padded batch rows, and the positions of a cache row.
    config:
        The runner's settings; the buckets are those up to ``max_batch``.
    agree:
        The ranks' capture vote (tensor parallelism), as for the chain step.
    """

    def __init__(
        self,
        target: Target,
        draft: Draft,
        *,
        chunk: int,
        hidden_size: int,
        hidden_dtype: torch.dtype,
        scratch_row: int,
        max_seq_len: int,
        device: torch.device,
        config: RunnerConfig | None = None,
        agree=None,
    ) -> None:
        self.target, self.draft, self.chunk, self.max_seq_len = target, draft, chunk, max_seq_len
        self.device, self.hidden_size, self.hidden_dtype = device, hidden_size, hidden_dtype
        self._offsets = torch.arange(chunk)
        self.sizes = tuple(n for n in (1, 2, 4, 8, 16) if n <= min(MAX_CHUNKS, chunk))
        max_batch = self.sizes[-1]
        config = dataclasses.replace(config or RunnerConfig(), buckets=self.sizes)
        if not config.toggles.prefill_graph:  # STEPGRAPH_PREFILL_GRAPH=0: the same forward, eagerly
            config = dataclasses.replace(config, toggles=dataclasses.replace(config.toggles, step_graph=False))
        buffers = {
            "tokens": Buffer((max_batch, chunk), torch.int64),
            "positions": Buffer((max_batch, chunk), torch.int64),
            "rows": Buffer((max_batch,), torch.int64, pad=scratch_row),
            "last": Buffer((max_batch,), torch.int64),  # the chunk's last position's index in its row
            "before": Buffer((max_batch, hidden_size), hidden_dtype),
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

    def _forward(self, buf, batch: int, sampling) -> dict[str, torch.Tensor]:
        w = self.width(batch)
        tokens, positions, rows = buf["tokens"][:, :w], buf["positions"][:, :w], buf["rows"]
        logits, hidden = self.target(tokens, positions, rows)
        before = buf["before"][:, None].to(hidden.dtype)
        self.draft(tokens, positions, torch.cat([before, hidden[:, :-1]], 1), rows)
        at = torch.arange(batch, device=tokens.device)
        return {"logits": logits[at, buf["last"]], "hidden": hidden[at, buf["last"]]}

    def __call__(self, spans, before: torch.Tensor):
        """``spans``: per row ``(tokens, start, cache_row)``, a chunk's prompt tokens (a list of at most
        ``width(len(spans))`` ints; ``len(spans)`` one of :attr:`sizes`) and its first position.
        ``before [n, D]``: the target's hidden state at each chunk's ``start - 1`` (zeros for a first
        chunk). Returns ``logits [n, V]`` and ``hidden [n, D]`` at each
        chunk's last position (views valid until the next call)."""
        n, C = len(spans), self.chunk
        tokens = torch.zeros((n, C), dtype=torch.int64)
        starts = torch.tensor([s for _, s, _ in spans], dtype=torch.int64)
        lengths = [len(t) for t, _, _ in spans]
        for i, (t, _, _) in enumerate(spans):
            tokens[i, : len(t)] = torch.tensor(t, dtype=torch.int64)
        positions = (starts[:, None] + self._offsets[None, :]).clamp(max=self.max_seq_len - 1)
        inputs = {
            "tokens": tokens,
            "positions": positions,
            "rows": torch.tensor([r for _, _, r in spans], dtype=torch.int64),
            "last": torch.tensor(lengths, dtype=torch.int64) - 1,
            "before": before,
        }
        out = self.runner.run(inputs)
        return out["logits"], out["hidden"]
