"""Static buffers: declared once at the largest batch, sliced per key, filled by one copy-in per run.

A graph reads and writes fixed addresses, so every tensor a step touches lives in a buffer allocated
once at the largest batch size. Rows past the real batch are *padding*: each buffer says what they hold
(a fill value such as a sentinel the kernels skip, zeros, or :data:`KEEP` to leave them alone).
"""

from __future__ import annotations

import enum
import math
import numbers
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import NoReturn

import torch

from stepgraph.copy_in import LIST_DTYPES, FusedLaunch, InputCopyPlan


class Pad(enum.Enum):
    """Padding policies that are not a fill value."""

    KEEP = "keep"  # padded rows keep whatever they held

    def __repr__(self) -> str:
        return f"Pad.{self.name}"


KEEP = Pad.KEEP

PadValue = int | float | bool | Pad


@dataclass(frozen=True)
class Buffer:
    """Declaration of one static buffer.

    Parameters
    ----------
    shape:
        Full shape; the leading dimension is the batch (the largest batch size the buffer serves).
    dtype:
        Element type. Inputs must match it exactly (no silent casts).
    pad:
        What padded rows hold on every run: a fill value (a sentinel the step treats as a no-op, or 0),
        or :data:`KEEP`. Padded rows must never write state that real rows read.
    """

    shape: tuple[int, ...]
    dtype: torch.dtype
    pad: PadValue = 0

    def __post_init__(self) -> None:
        if not isinstance(self.shape, (tuple, list, torch.Size)) or not all(
            isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in self.shape
        ):
            raise TypeError(
                f"Buffer shape must be a tuple of ints with the batch first, e.g. Buffer((8,), ...) or "
                f"Buffer((8, 1024), ...); got {self.shape!r}"
            )
        shape = tuple(int(s) for s in self.shape)
        if not shape or any(s < 1 for s in shape):
            raise ValueError(f"Buffer shape must be non-empty with positive sizes (batch first), got {self.shape}")
        object.__setattr__(self, "shape", shape)
        if not isinstance(self.dtype, torch.dtype):
            raise TypeError(f"Buffer dtype must be a torch.dtype, got {self.dtype!r}")
        if self.pad is KEEP:
            return
        if isinstance(self.pad, float) and math.isnan(self.pad) and not self.dtype.is_floating_point:
            raise ValueError(f"pad NaN is not representable in {self.dtype}; use an integer sentinel")
        try:
            filled = torch.full((1,), self.pad, dtype=self.dtype)
        except (RuntimeError, TypeError, OverflowError) as e:
            raise ValueError(f"pad {self.pad!r} is not representable in {self.dtype}: {e}") from None
        back = filled.item()
        if not (self.dtype.is_floating_point or self.dtype.is_complex) and back != self.pad:
            raise ValueError(f"pad {self.pad!r} does not fit {self.dtype} (stored as {back})")


class StaticBuffers(Mapping[str, torch.Tensor]):
    """The allocated buffers of a step, by name, with per-batch views and a one-operation copy-in.

    Shape: every tensor is ``(max_batch, *row_shape)``; :meth:`views` gives ``[:batch]`` slices.
    """

    def __init__(
        self,
        specs: Mapping[str, Buffer],
        device: torch.device | str,
        *,
        one_launch_copy: bool = True,
        staged_copy: bool | None = None,
    ) -> None:
        if not specs:
            raise ValueError("declare at least one buffer")
        for name, spec in specs.items():
            if not isinstance(spec, Buffer):
                raise TypeError(f"buffer {name!r} must be declared with stepgraph.Buffer, got {type(spec).__name__}")
        batches = {spec.shape[0] for spec in specs.values()}
        if len(batches) != 1:
            detail = ", ".join(f"{n}: {s.shape[0]}" for n, s in specs.items())
            raise ValueError(f"every buffer needs the same leading (batch) size; got {detail}")
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.specs: dict[str, Buffer] = dict(specs)
        self.max_batch: int = batches.pop()
        self.tensors: dict[str, torch.Tensor] = {
            name: torch.empty(spec.shape, dtype=spec.dtype, device=self.device) for name, spec in specs.items()
        }
        self._views: dict[int, dict[str, torch.Tensor]] = {}
        self._copy = InputCopyPlan(  # the copy-in of every run's inputs
            [self.tensors[n] for n in self.specs],
            [spec.pad if spec.pad is not KEEP else None for spec in self.specs.values()],
            names=list(self.specs),
            explain=self._explain,
            use_kernel=one_launch_copy,
            staged=staged_copy,
        )
        self.reset()

    # Mapping interface -------------------------------------------------------------------------
    def __getitem__(self, name: str) -> torch.Tensor:
        return self.tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    @property
    def copy_plan(self) -> InputCopyPlan:
        """The copy-in plan behind :meth:`stage` / :meth:`commit` (read-only use: its counters and
        :meth:`~stepgraph.copy_in.InputCopyPlan.staged`)."""
        return self._copy

    # ----------------------------------------------------------------------------------------------
    def views(self, batch_size: int) -> dict[str, torch.Tensor]:
        """``{name: tensor[:batch_size]}``, cached so the same view objects come back every time."""
        if not 1 <= batch_size <= self.max_batch:
            raise ValueError(f"batch_size {batch_size} outside 1..{self.max_batch} (the buffers' batch size)")
        views = self._views.get(batch_size)
        if views is None:
            views = {name: t[:batch_size] for name, t in self.tensors.items()}
            self._views[batch_size] = views
        return views

    def reset(self) -> None:
        """Fill every buffer with its pad value (``KEEP`` buffers are zeroed once here)."""
        for name, t in self.tensors.items():
            pad = self.specs[name].pad
            t.fill_(0 if pad is KEEP else pad)

    def check_inputs(self, inputs: Mapping[str, torch.Tensor]) -> int:
        """Validate ``inputs`` against the declarations; return their (common) batch size. Copies nothing.

        Raises
        ------
        ValueError / TypeError
            Naming the buffer and what to change: unknown name, shape, dtype, device, empty or
            inconsistent batch.
        """
        try:
            return self._copy.stage(inputs, write=False)
        finally:
            self._copy.abandon()

    def _explain(self, name: str, src: object) -> NoReturn:
        """Raise the error that says what is wrong with input ``name`` (called once a check failed)."""
        spec = self.specs.get(name)
        if spec is None:
            raise ValueError(f"input {name!r} is not a declared buffer; declared: {', '.join(self.specs)}")
        if not isinstance(src, torch.Tensor):
            lists = " or a list of ints" if len(spec.shape) == 1 and spec.dtype in LIST_DTYPES else ""
            raise TypeError(f"input {name!r} must be a torch.Tensor{lists}, got {type(src).__name__}")
        if src.dtype != spec.dtype:
            raise TypeError(f"input {name!r} has dtype {src.dtype}; the buffer is {spec.dtype} (convert it first)")
        want = ("B", *spec.shape[1:])
        raise ValueError(f"input {name!r} has shape {tuple(src.shape)}; expected {want} with B <= {self.max_batch}")

    def stage(self, inputs: Mapping[str, torch.Tensor], batch_size: int | None = None) -> int:
        """The real batch size of a run, with its input copy staged for :meth:`commit`.

        ``inputs`` (``{name: (B, *row)}``) are checked and their copy prepared in one pass (see
        :meth:`check_inputs`); without inputs (already in the buffers) ``batch_size`` is the batch. Both
        given: they must agree.

        Raises
        ------
        ValueError / TypeError
            For bad inputs, an empty or oversize batch, a disagreement, or neither given.
        """
        real = self._copy.stage(inputs) if inputs else None
        if batch_size is not None:
            problem = None
            if batch_size < 1:
                problem = f"empty batch: batch_size must be >= 1, got {batch_size}"
            elif real is not None and real != batch_size:
                problem = f"batch_size={batch_size} but the inputs have {real} rows"
            elif batch_size > self.max_batch:
                problem = f"batch of {batch_size} exceeds the buffers' batch size {self.max_batch}"
            if problem:
                self._copy.abandon()
                raise ValueError(problem)
            real = batch_size
        if real is None:
            raise ValueError("run() needs inputs or batch_size (inputs already in the buffers)")
        return real

    def commit(self, padded_batch: int, then: FusedLaunch | None = None) -> bool:
        """Copy the inputs :meth:`stage` staged into rows ``[0, B)`` and pad rows ``[B, padded_batch)``, in
        one launch (see :class:`stepgraph.copy_in.InputCopyPlan`). Nothing staged: nothing.
        ``then`` (made by :meth:`fuser`): a key's graph launched with the copy; returns whether it was."""
        return self._copy.commit(padded_batch, then)

    def fuser(self) -> Callable[[torch.cuda.CUDAGraph], FusedLaunch | None] | None:
        """What makes the input copy and a key's graph one launch for :meth:`commit`, or ``None`` (see
        :meth:`stepgraph.copy_in.InputCopyPlan.fuser`)."""
        return self._copy.fuser()

    def abandon(self) -> None:
        """Drop the copy :meth:`stage` staged (if any): it will not land."""
        self._copy.abandon()

    def copy_in(self, inputs: Mapping[str, torch.Tensor], batch_size: int, padded_batch: int) -> None:
        """Copy ``inputs`` into rows ``[0, batch_size)`` and pad rows ``[batch_size, padded_batch)``.

        Buffers not named in ``inputs`` are left untouched (step state). All copies and pad fills go
        in one kernel launch, which reads host inputs from pinned memory in place; see
        :class:`stepgraph.copy_in.InputCopyPlan`.
        """
        if padded_batch > self.max_batch or padded_batch < batch_size:
            raise ValueError(f"padded batch {padded_batch} must be in [{batch_size}, {self.max_batch}]")
        if inputs:
            self._copy.stage(inputs, batch_size)
            self._copy.commit(padded_batch)

    def pad_rows(self, names: list[str], start: int, end: int) -> None:
        """Fill rows ``[start, end)`` of the named buffers with their pad values (``KEEP``: untouched)."""
        for name in names:
            pad = self.specs[name].pad
            if pad is not KEEP and end > start:
                self.tensors[name][start:end].fill_(pad)
