"""What :meth:`StepGraphRunner.run` hands back: views of the step's outputs, and when they go stale."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from stepgraph.errors import StaleOutputError

if TYPE_CHECKING:
    from stepgraph.runner import StepGraphRunner


class StepOutputs(Mapping[str, torch.Tensor]):
    """Outputs of one :meth:`StepGraphRunner.run`, sliced to the real batch.

    Lifetime: the tensors are views of the key's static outputs and are overwritten by the next run
    (of any key: keys share one memory pool). Reading through this mapping after the next run raises
    :class:`StaleOutputError`; call :meth:`clone` (or ``run(..., copy_outputs=True)``) to keep them.
    """

    __slots__ = ("_tensors", "_runner", "_generation")

    def __init__(self, tensors: dict[str, torch.Tensor], runner: StepGraphRunner | None, generation: int) -> None:
        self._tensors = tensors
        self._runner = runner
        self._generation = generation

    def _check(self) -> None:
        if self._runner is not None and self._runner._generation != self._generation:
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
