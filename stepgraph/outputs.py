"""What :meth:`StepGraphRunner.run` hands back: views of the step's outputs, and when they go stale."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import torch

from stepgraph.errors import StaleOutputError


class Generational(Protocol):
    """What hands outputs out: its ``generation`` moves on with every run."""

    @property
    def generation(self) -> int: ...


class StepOutputs(Mapping[str, torch.Tensor]):
    """Outputs of one :meth:`StepGraphRunner.run`, sliced to the real batch.

    Lifetime: the tensors are views of the key's static outputs and are overwritten by the next run
    (of any key: keys share one memory pool). Reading through this mapping after the next run raises
    :class:`StaleOutputError`; call :meth:`clone` (or ``run(..., copy_outputs=True)``) to keep them.
    """

    __slots__ = ("_tensors", "_runner", "_generation")

    def __init__(self, tensors: dict[str, torch.Tensor], runner: Generational | None, generation: int) -> None:
        self._tensors = tensors
        self._runner = runner
        self._generation = generation

    def _check(self) -> None:
        if self._runner is not None and self._runner.generation != self._generation:
            raise StaleOutputError(
                "these step outputs were overwritten by a later run(); copy them first with outputs.clone() "
                "or run(..., copy_outputs=True)"
            )

    def __getitem__(self, name: str) -> torch.Tensor:
        self._check()
        return self._tensors[name]

    def __iter__(self):
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def clone(self) -> dict[str, torch.Tensor]:
        self._check()
        return {k: v.clone() for k, v in self._tensors.items()}


def poison(tensors: list[torch.Tensor]) -> None:
    """Fill handed-out copies with values no step produces (NaN, True, -1 or the largest unsigned), so that
    a read after the next run shows (``STEPGRAPH_DEBUG=1``)."""
    for t in tensors:
        if t.dtype.is_floating_point or t.dtype.is_complex:
            t.fill_(float("nan"))
        elif t.dtype == torch.bool:
            t.fill_(True)
        else:
            t.fill_(-1 if t.dtype.is_signed else torch.iinfo(t.dtype).max)
