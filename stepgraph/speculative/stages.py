"""The chain step's stages as data: a typed context flows through them, and each returns what it made.

A step is a sequence of :class:`Stage` objects, each a function of the :class:`StepContext` that returns
a :class:`StageResult`. A result declares which of its tensors every tensor-parallel rank must hold
identically (``SHARED``); the step broadcasts exactly those, from rank 0, after the stage that made them.
The next step's state (what the relay carries) is what the stages write into ``StepContext.next``.

The chain step's stages (:class:`~stepgraph.speculative.step.ChainStep`): draft (the K-1 draft steps),
verify (the target over the K+1 positions, and acceptance), scores (the emitted tokens'
log-probabilities; only when the step reports them), extend (the draft over the verified positions and
the tail), then the relay's commit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from stepgraph.sampling import Sampling
from stepgraph.speculative.scores import Scores

RelayFields = dict[str, torch.Tensor]  # a relay field name -> its [B, ...] rows


class StageResult:
    """What one stage made. ``SHARED`` names the tensors every rank must hold identically (broadcast from
    rank 0 after the stage under tensor parallelism)."""

    SHARED: ClassVar[tuple[str, ...]] = ()

    def shared(self) -> list[torch.Tensor]:
        return [getattr(self, name) for name in self.SHARED]


@dataclass
class Drafted(StageResult):
    """The draft stage: the step's K draft tokens ``[B, K]`` (``[B, 0]`` for plain decoding)."""

    drafts: torch.Tensor


@dataclass
class Verified(StageResult):
    """The verify stage. ``tokens [B, K+1]``: accepted drafts, then the bonus or correction, then -1;
    ``extend_tokens [B, K+1]``: the draft-extend input; ``num_accepted [B]``; ``accepted_row [B]``: the
    last accepted position's row among the verify's rows flattened over the batch; the target's
    ``hidden [B, K+1, D]`` and ``positions [B, K+1]``; ``next_token`` and ``next_seq_len`` ``[B]``: the
    next step's state, written into the relay's outputs; the target's ``logits [B, K+1, V]`` and the ones
    acceptance read, ``scored`` (penalised, float32; the same tensor without penalties), for the stages
    after."""

    SHARED: ClassVar[tuple[str, ...]] = (
        "tokens",
        "extend_tokens",
        "num_accepted",
        "accepted_row",
        "next_token",
        "next_seq_len",
    )

    tokens: torch.Tensor
    extend_tokens: torch.Tensor
    num_accepted: torch.Tensor
    accepted_row: torch.Tensor
    hidden: torch.Tensor
    positions: torch.Tensor
    next_token: torch.Tensor
    next_seq_len: torch.Tensor
    logits: torch.Tensor
    scored: torch.Tensor


@dataclass
class Scored(StageResult):
    """The scores stage (with log-probabilities on): the emitted tokens' log-probabilities and their top
    alternatives (:class:`~stepgraph.speculative.scores.Scores`), computed from the verify's tokens as
    every rank holds them."""

    scores: Scores


@dataclass
class Extended(StageResult):
    """The draft-extend stage: the next step's first draft token ``[B]`` and draft feature ``[B, Dd]``,
    written into the relay's outputs."""

    next_draft: torch.Tensor
    next_hidden: torch.Tensor


@dataclass
class StepContext:
    """One step of one key: the batch, its sampling class and draft length, the requests' gathered relay
    rows (``state``), where the next step's state goes (``next``), their slots, whether the step applies
    the requests' penalties (``penalised``), the step's input buffers (``inputs``, ``[batch, ...]`` views)
    and each stage's result by name."""

    batch: int
    sampling: Sampling
    draft_len: int
    state: RelayFields
    next: RelayFields
    slots: torch.Tensor | None = None  # [>= batch] the requests' relay slots (the commit's destinations)
    penalised: bool = False
    inputs: Mapping[str, torch.Tensor] = field(default_factory=dict)  # the step's static input buffers
    results: dict[str, StageResult] = field(default_factory=dict)

    @property
    def drafted(self) -> Drafted:
        return self.results["draft"]  # type: ignore[return-value]

    @property
    def verified(self) -> Verified:
        return self.results["verify"]  # type: ignore[return-value]


@dataclass(frozen=True)
class Stage:
    """One stage: ``run(ctx)`` reads the context (the earlier stages' results) and returns its own.
    ``spliced``: captured as a graph of its own in splice mode (:mod:`stepgraph.splice`)."""

    name: str
    run: Callable[[StepContext], StageResult]
    spliced: bool = True
