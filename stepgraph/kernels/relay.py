"""Relay stores and gathers: per-request state slots written by one step and read by the next.

Store: ``fields[i][slot[b]] = srcs[i][b]`` for every field ``i`` in **one** launch (slot < 0: skipped).
Gather: ``outs[i][b] = fields[i][slot[b]]`` in one launch (slot < 0: the field's pad value).
Fields may have any dtype (<= 8 bytes) and row size. An out-of-range slot is skipped by the kernel as
well (never an illegal address); :func:`check_slots` is the eager, host-side check that reports it.

Plans are built once over fixed buffers, so they can be captured in a CUDA graph and replayed.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from . import row_copy as rc
from ._common import check, check_same_device, is_capturing, use_triton


def check_slots(slots: torch.Tensor, num_slots: int) -> None:
    """Eager check (it syncs the host; call outside capture): every slot is -1 or in ``[0, num_slots)``."""
    check(slots.dim() == 1, f"slots must be 1-D [B], got shape {tuple(slots.shape)}")
    check(not slots.dtype.is_floating_point, f"slots must be an integer tensor, got {slots.dtype}")
    if slots.numel():
        lo, hi = int(slots.min()), int(slots.max())
        check(lo >= -1 and hi < num_slots, f"slots must be -1 (padding) or in [0, {num_slots}); got range [{lo}, {hi}]")


def relay_store_ref(
    fields: Sequence[torch.Tensor], srcs: Sequence[torch.Tensor], slots: torch.Tensor, scratch_row: int | None = None
) -> None:
    """Reference: one index store per field. Cost: B rows read + written per field, one launch each.

    ``scratch_row=None``: rows with ``slot < 0`` are skipped (boolean mask: syncs the host, eager only).
    ``scratch_row=r``: they land in row ``r`` instead, which nothing reads (graph-safe, no sync).
    """
    if scratch_row is None:
        keep = slots >= 0
        idx = slots[keep].long()
        for dst, src in zip(fields, srcs, strict=True):
            dst.index_copy_(0, idx, src[: slots.shape[0]][keep])
        return
    idx = torch.where(slots >= 0, slots, torch.full_like(slots, scratch_row)).long()
    for dst, src in zip(fields, srcs, strict=True):
        dst.index_copy_(0, idx, src[: slots.shape[0]])


def relay_gather_ref(
    fields: Sequence[torch.Tensor], outs: Sequence[torch.Tensor], slots: torch.Tensor, pads: Sequence
) -> None:
    """Reference: one index gather per field, pad value where ``slot < 0``."""
    keep = slots >= 0
    idx = torch.where(keep, slots, torch.zeros_like(slots)).long()
    for src, out, pad in zip(fields, outs, pads, strict=True):
        rows = src.index_select(0, idx)
        mask = keep.view(-1, *([1] * (rows.dim() - 1)))
        fill = (
            torch.zeros((), dtype=src.dtype, device=src.device)
            if pad is None
            else torch.full((), pad, dtype=src.dtype, device=src.device)
        )
        out[: slots.shape[0]].copy_(torch.where(mask, rows, fill))


class _Plan:
    """A static table over fixed tensors, uploaded once; ``launch`` replays it for a slot tensor."""

    def __init__(self, fields: list[rc.Field], device: torch.device, mode: int) -> None:
        self.word = rc.word_bytes(fields)
        self.max_words = max(f.row_bytes // self.word for f in fields)
        self.num_fields = len(fields)
        self.mode = mode
        self.table = torch.tensor(rc.table_rows(fields, self.word), dtype=torch.int64).to(device)

    def launch(self, slots: torch.Tensor, rows: int) -> None:
        rc.launch(self.table, self.num_fields, rows, self.max_words, self.word, rows, index=slots, mode=self.mode)


def _check_pairs(fields, others, what: str) -> None:
    check(len(fields) == len(others) and len(fields) > 0, f"give one {what} per relay field (at least one)")
    for i, (f, o) in enumerate(zip(fields, others, strict=True)):
        check(f.dtype == o.dtype, f"field {i}: relay dtype {f.dtype} != {what} dtype {o.dtype}")
        check(
            f.shape[1:] == o.shape[1:],
            f"field {i}: relay rows {tuple(f.shape[1:])} != {what} rows {tuple(o.shape[1:])}",
        )
        check_same_device(f"{what} {i}", o, f, f"relay field {i}")


class RelayStore:
    """``fields[i][slot[b]] = srcs[i][b]`` for fixed ``fields`` (``[S, *row]``) and ``srcs`` (``[Bmax, *row]``).

    CUDA graph: build outside the capture; calling it inside records one kernel launch. Unfused
    (``fused=False``), padded rows go to ``scratch_row`` (graph-safe) or are masked out (eager only).
    """

    def __init__(
        self,
        fields: Sequence[torch.Tensor],
        srcs: Sequence[torch.Tensor],
        *,
        fused: bool = True,
        scratch_row: int | None = None,
    ) -> None:
        _check_pairs(fields, srcs, "source")
        self.fields, self.srcs, self.scratch_row = list(fields), list(srcs), scratch_row
        self.fused = fused and use_triton(fields[0]) and all(rc.rows_contiguous(t) for t in (*fields, *srcs))
        if self.fused:
            specs = [rc.field(s, f, None, f.shape[0]) for f, s in zip(self.fields, self.srcs, strict=True)]
            self._plan = _Plan(specs, fields[0].device, mode=2)

    def __call__(self, slots: torch.Tensor) -> None:
        """Shape: ``slots`` is ``[B]`` (int32/int64, -1 for padded rows), ``B <= Bmax``."""
        check(
            slots.dim() == 1 and slots.shape[0] <= self.srcs[0].shape[0],
            "slots must be [B] with B <= the sources' rows",
        )
        if self.fused:
            self._plan.launch(slots, slots.shape[0])
        else:
            relay_store_ref(self.fields, self.srcs, slots, self.scratch_row)


class RelayGather:
    """``outs[i][b] = fields[i][slot[b]]`` (pad where ``slot < 0``) for fixed tensors, in one launch."""

    def __init__(
        self, fields: Sequence[torch.Tensor], outs: Sequence[torch.Tensor], pads: Sequence, *, fused: bool = True
    ) -> None:
        _check_pairs(fields, outs, "output")
        check(len(pads) == len(fields), "one pad per relay field")
        self.fields, self.outs, self.pads = list(fields), list(outs), list(pads)
        self.fused = fused and use_triton(fields[0]) and all(rc.rows_contiguous(t) for t in (*fields, *outs))
        if self.fused:
            specs = [
                rc.field(f, o, 0 if p is None else p, f.shape[0])
                for f, o, p in zip(self.fields, self.outs, self.pads, strict=True)
            ]
            self._plan = _Plan(specs, fields[0].device, mode=1)

    def __call__(self, slots: torch.Tensor) -> None:
        check(
            slots.dim() == 1 and slots.shape[0] <= self.outs[0].shape[0],
            "slots must be [B] with B <= the outputs' rows",
        )
        if self.fused:
            self._plan.launch(slots, slots.shape[0])
        else:
            relay_gather_ref(self.fields, self.outs, slots, self.pads)


def relay_store(fields: Sequence[torch.Tensor], srcs: Sequence[torch.Tensor], slots: torch.Tensor) -> None:
    """One-shot :class:`RelayStore` (builds its table now: call outside graph capture)."""
    check(not is_capturing(), "relay_store builds a table; inside a capture use a RelayStore built beforehand")
    RelayStore(fields, srcs)(slots)


def relay_gather(
    fields: Sequence[torch.Tensor], outs: Sequence[torch.Tensor], slots: torch.Tensor, pads: Sequence | None = None
) -> None:
    """One-shot :class:`RelayGather` (builds its table now: call outside graph capture)."""
    check(not is_capturing(), "relay_gather builds a table; inside a capture use a RelayGather built beforehand")
    RelayGather(fields, outs, [None] * len(fields) if pads is None else pads)(slots)
