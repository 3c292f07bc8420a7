"""One-launch input copy: a step's inputs (many tensors, mixed dtypes and sizes) into static buffers.

``dst[:n] = src[:n]`` and ``dst[n:padded] = pad`` for every input, in **one** kernel launch. Inputs that
arrive on the host are staged through one pinned buffer and reach the device in one host-to-device
copy, together with the pointer table. Where the kernel cannot apply (a row that is not one contiguous
run of bytes, elements wider than 8 bytes, a device Triton does not run on) that input falls back to
``copy_`` + ``fill_`` with identical bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from . import _row_copy as rc
from ._common import check, is_capturing, use_triton

# Pinned buffers in rotation; a slot is reused only after its copy finished. With an overlapped loop two
# steps are in flight, so a ring of 2 made the host wait for a copy still queued behind them (a bubble
# at every batch change, seen at B=8 on the H200): 4 keeps that wait from ever blocking.
STAGING_RING = 4
ALIGN = 16


def input_copy_ref(
    srcs: Sequence[torch.Tensor], dsts: Sequence[torch.Tensor], num_rows: int, padded_rows: int, pads: Sequence
) -> None:
    """Reference: one ``copy_`` and one ``fill_`` per tensor.

    Cost: reads ``num_rows`` rows and writes ``padded_rows`` rows of each tensor; 2 launches per tensor.
    """
    for src, dst, pad in zip(srcs, dsts, pads, strict=True):
        dst[:num_rows].copy_(src[:num_rows], non_blocking=True)
        if pad is not None and padded_rows > num_rows:
            dst[num_rows:padded_rows].fill_(pad)


def input_copy(
    srcs: Sequence[torch.Tensor],
    dsts: Sequence[torch.Tensor],
    num_rows: int,
    padded_rows: int | None = None,
    pads: Sequence | None = None,
) -> None:
    """Copy ``srcs[i][:num_rows]`` into ``dsts[i]`` and fill ``dsts[i][num_rows:padded_rows]`` with ``pads[i]``.

    Shapes: ``srcs[i]`` is ``(>= num_rows, *row)``, ``dsts[i]`` is ``(>= padded_rows, *row)`` with the same
    row shape and dtype. ``pads[i] = None`` leaves padded rows alone. One launch (plus one host-to-device
    copy when some sources are on the host).

    CUDA graph: builds a table on every call, so call it outside a capture; a :class:`InputCopyPlan` built
    once is what a runner uses.
    """
    padded_rows = num_rows if padded_rows is None else padded_rows
    pads = [None] * len(dsts) if pads is None else list(pads)
    plan = InputCopyPlan(dsts, pads)
    plan(list(range(len(dsts))), list(srcs), num_rows, padded_rows)


class InputCopyPlan:
    """Copy-in for a fixed set of destination buffers (the table's destinations are fixed once).

    ``plan(indices, srcs, n, padded)`` copies ``srcs[j]`` into destination ``indices[j]``.
    """

    def __init__(
        self, dsts: Sequence[torch.Tensor], pads: Sequence, *, use_kernel: bool = True, staged: bool | None = None
    ) -> None:
        check(len(dsts) == len(pads), "one pad (or None) per destination")
        self.dsts = list(dsts)
        self.pads = list(pads)
        self.use_kernel = bool(dsts) and use_kernel and use_triton(dsts[0])
        self.kernel_ok = [rc.rows_contiguous(d) for d in self.dsts]
        self.launches = 0  # kernel launches made (for tests and benchmarks)
        self._device = dsts[0].device if dsts else torch.device("cpu")
        # staged: the table (and host rows) go through one staging buffer and one copy (always on CUDA;
        # on the CPU only when asked, so tests cover the same path)
        self.staged = self._device.type == "cuda" if staged is None else staged
        self._staging: torch.Tensor | None = None
        self._pinned: list[torch.Tensor] = []
        self._events: list[torch.cuda.Event | None] = []
        self._turn = 0

    # -- staging (CUDA only): [table | host rows], one pinned buffer per ring slot -----------------
    def _ensure_staging(self) -> None:
        if self._staging is not None:
            return
        table_bytes = rc.COLS * 8 * len(self.dsts)
        data_bytes = sum(_aligned(d.shape[0] * rc.row_bytes(d)) for d in self.dsts)
        total = _aligned(table_bytes) + data_bytes
        self._staging = torch.empty(total, dtype=torch.uint8, device=self._device)
        pin = self._device.type == "cuda"
        self._pinned = [torch.empty(total, dtype=torch.uint8, pin_memory=pin) for _ in range(STAGING_RING)]
        self._events = [None] * STAGING_RING

    def __call__(self, indices: Sequence[int], srcs: Sequence[torch.Tensor], n: int, padded: int) -> None:
        check(len(indices) == len(srcs), "one source per destination index")
        kernel_jobs, fallback = [], []
        for i, src in zip(indices, srcs, strict=True):
            dst = self.dsts[i]
            check(src.dtype == dst.dtype, f"source dtype {src.dtype} != destination dtype {dst.dtype}")
            check(src.shape[1:] == dst.shape[1:], f"source rows {tuple(src.shape[1:])} != {tuple(dst.shape[1:])}")
            check(src.shape[0] >= n and dst.shape[0] >= padded, f"need {n} source rows and {padded} destination rows")
            ok = self.use_kernel and self.kernel_ok[i] and rc.rows_contiguous(src) and src.numel() > 0
            (kernel_jobs if ok else fallback).append((i, src))
        if fallback:
            input_copy_ref(
                [s for _, s in fallback],
                [self.dsts[i] for i, _ in fallback],
                n,
                padded,
                [self.pads[i] for i, _ in fallback],
            )
        if kernel_jobs:
            if self.staged:
                self._launch_staged(kernel_jobs, n, padded)
            else:
                self._launch_local(kernel_jobs, n, padded)

    def _launch_local(self, jobs, n: int, padded: int) -> None:
        fields = [rc.field(src.to(self._device), self.dsts[i], self.pads[i], padded) for i, src in jobs]
        w = rc.word_bytes(fields)
        table = torch.tensor(rc.table_rows(fields, w), dtype=torch.int64, device=self._device)
        self._launch(table, fields, w, n, padded)

    def _launch_staged(self, jobs, n: int, padded: int) -> None:
        check(not is_capturing(), "input copy-in runs outside graph capture (it stages host data)")
        self._ensure_staging()
        slot = self._turn % STAGING_RING
        self._turn += 1
        if self._events[slot] is not None:
            self._events[slot].synchronize()  # the copy that last read this pinned buffer is done
        pinned, staging = self._pinned[slot], self._staging
        table_bytes = _aligned(rc.COLS * 8 * len(jobs))
        offset, fields = table_bytes, []
        for i, src in jobs:
            dst = self.dsts[i]
            if src.device.type == "cpu":  # a host source: its rows travel in the staging copy
                nbytes = n * rc.row_bytes(dst)
                rows = src[:n].contiguous().view(-1).view(torch.uint8)
                pinned[offset : offset + nbytes].copy_(rows)
                f = rc.field(dst, dst, self.pads[i], padded)  # strides from dst; src patched below
                f.src_addr, f.src_stride = staging.data_ptr() + offset, rc.row_bytes(dst)
                offset += _aligned(nbytes)
            else:
                f = rc.field(src, dst, self.pads[i], padded)
            fields.append(f)
        w = rc.word_bytes(fields)
        table = torch.tensor(rc.table_rows(fields, w), dtype=torch.int64).view(-1)
        pinned[: table.numel() * 8].view(torch.int64).copy_(table)
        staging[:offset].copy_(pinned[:offset], non_blocking=True)
        if self._device.type == "cuda":
            event = torch.cuda.Event()
            event.record()
            self._events[slot] = event
        self._launch(staging.view(torch.int64), fields, w, n, padded)

    def _launch(self, table: torch.Tensor, fields, w: int, n: int, padded: int) -> None:
        max_words = max(f.row_bytes // w for f in fields)
        rc.launch(table, len(fields), padded, max_words, w, n)
        self.launches += 1


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class StaticCopy:
    """``dsts[i][:n] = srcs[i][:n]`` (pad rows ``[n, padded)``) for fixed tensors: the table is built and
    uploaded once, so the copy can be captured in a CUDA graph (one kernel node)."""

    def __init__(
        self, srcs: Sequence[torch.Tensor], dsts: Sequence[torch.Tensor], pads: Sequence | None = None
    ) -> None:
        pads = [None] * len(dsts) if pads is None else list(pads)
        check(len(srcs) == len(dsts) == len(pads) and len(dsts) > 0, "one source and one pad per destination")
        for s, d in zip(srcs, dsts, strict=True):
            check(
                s.dtype == d.dtype and s.shape[1:] == d.shape[1:],
                "sources and destinations must match in dtype and rows",
            )
            check(rc.rows_contiguous(s) and rc.rows_contiguous(d), "every row must be one contiguous run of bytes")
        check(use_triton(dsts[0]), "StaticCopy needs CUDA (or TRITON_INTERPRET=1 on the CPU)")
        fields = [rc.field(s, d, p, d.shape[0]) for s, d, p in zip(srcs, dsts, pads, strict=True)]
        self.word = rc.word_bytes(fields)
        self.max_words = max(f.row_bytes // self.word for f in fields)
        self.num_fields = len(fields)
        self.table = torch.tensor(rc.table_rows(fields, self.word), dtype=torch.int64).to(dsts[0].device)

    def __call__(self, n: int, padded: int | None = None) -> None:
        rc.launch(self.table, self.num_fields, n if padded is None else padded, self.max_words, self.word, n)
