"""One-launch input copy: a step's inputs (many tensors, mixed dtypes and sizes) into static buffers.

``dst[:n] = src[:n]`` and ``dst[n:padded] = pad`` for every input, in **one** kernel launch, whose host
cost does not grow with Python work per field: :class:`InputCopyPlan` computes everything known at
declaration once (destinations, strides, pad patterns, word sizes, a captured launch), and a call only
writes source addresses (and host rows) into pinned memory that the kernel reads in place. Where the
kernel cannot apply (a row that is not one contiguous run of bytes, elements wider than 8 bytes, a
device Triton does not run on) that input falls back to ``copy_`` + ``fill_`` with identical bytes.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from . import _row_copy as rc
from ._common import check, use_triton
from ._row_copy import _word_ptr

# Host buffers in rotation; one is reused only after the copy that read it finished. With an overlapped
# loop two steps are in flight, so a ring of 2 made the host wait for a copy still queued behind them (a
# bubble at every batch change, seen at B=8 on the H200). The ring is 16 deep in groups of 4 sharing one
# event (recording and waiting on an event cost about 2 us of host time each; once per 4 copies here).
STAGING_RING = 16
GROUP = 4
ALIGN = 16
BLOCK = 256  # words per iteration of a row
# table layout (int64 words): a header, then one entry per destination
HEADER = 8  # n, padded, generation
COLS = 8
ACTIVE, SRC, DST, ROW_BYTES, SRC_STRIDE, DST_STRIDE, FILL, FLAGS = range(COLS)
WORD_MASK, HAS_FILL = 15, 16  # FLAGS: word bytes | has-fill bit
# the same layout for the kernel (Triton reads globals only as constexpr)
_HEADER, _COLS, _HAS_FILL, _WORD_MASK = (
    tl.constexpr(HEADER),
    tl.constexpr(COLS),
    tl.constexpr(HAS_FILL),
    tl.constexpr(WORD_MASK),
)
_ACTIVE, _SRC, _DST, _ROW_BYTES = tl.constexpr(ACTIVE), tl.constexpr(SRC), tl.constexpr(DST), tl.constexpr(ROW_BYTES)
_SRC_STRIDE, _DST_STRIDE, _FILL, _FLAGS = (tl.constexpr(c) for c in (SRC_STRIDE, DST_STRIDE, FILL, FLAGS))


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


@triton.jit
def _copy_row(src_addr, dst_addr, r, copy, row_bytes, src_stride, dst_stride, fill,
              WORD: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    """Row ``r``: ``dst = src`` when ``copy``, else the fill pattern, in words of ``WORD`` bytes."""
    row_words = row_bytes // WORD
    src = _word_ptr(src_addr, WORD) + r * (src_stride // WORD)
    dst = _word_ptr(dst_addr, WORD) + r * (dst_stride // WORD)
    limit = tl.where(copy, row_words, 0)
    for start in range(0, row_words, BLOCK):
        offs = start + tl.arange(0, BLOCK).to(tl.int64)
        vals = tl.load(src + offs, mask=offs < limit, other=0)
        if WORD == 8:
            fill_word = fill.to(vals.dtype, bitcast=True)
        else:
            shift = ((offs * WORD) % 8) * 8
            fill_word = ((fill >> shift) & ((1 << (8 * WORD)) - 1)).to(vals.dtype)
        tl.store(dst + offs, tl.where(copy, vals, fill_word), mask=offs < row_words)


@triton.jit
def _copy_in_kernel(table_addr, BLOCK: tl.constexpr):
    """Program (field ``f``, row ``r``) of a copy-in described by the table at ``table_addr``. Header:
    ``n``, ``padded``, ``generation``; a field takes part when its entry carries the header's generation,
    so fields not given keep their rows and nothing is reset per call."""
    f = tl.program_id(0)
    r = tl.program_id(1).to(tl.int64)
    head = table_addr.to(tl.pointer_type(tl.int64))
    if r < tl.load(head + 1):
        entry = head + _HEADER + f * _COLS
        if tl.load(entry + _ACTIVE) == tl.load(head + 2):
            copy = r < tl.load(head)
            flags = tl.load(entry + _FLAGS)
            if copy | ((flags & _HAS_FILL) != 0):
                word = flags & _WORD_MASK
                src = tl.load(entry + _SRC)
                dst = tl.load(entry + _DST)
                row_bytes = tl.load(entry + _ROW_BYTES)
                src_stride = tl.load(entry + _SRC_STRIDE)
                dst_stride = tl.load(entry + _DST_STRIDE)
                fill = tl.load(entry + _FILL)
                if word == 8:
                    _copy_row(src, dst, r, copy, row_bytes, src_stride, dst_stride, fill, 8, BLOCK)
                elif word == 4:
                    _copy_row(src, dst, r, copy, row_bytes, src_stride, dst_stride, fill, 4, BLOCK)
                elif word == 2:
                    _copy_row(src, dst, r, copy, row_bytes, src_stride, dst_stride, fill, 2, BLOCK)
                else:
                    _copy_row(src, dst, r, copy, row_bytes, src_stride, dst_stride, fill, 1, BLOCK)


def _word(*values: int) -> int:
    """The largest of 8, 4, 2, 1 that divides every value (addresses, strides, sizes in bytes)."""
    w = 8
    for v in values:
        low = v & -v
        if low and low < w:
            w = low
    return w


class InputCopyPlan:
    """Copy-in for a fixed set of destination buffers: everything known at declaration is computed once.

    ``plan(indices, srcs, n, padded)`` copies ``srcs[j][:n]`` into destination ``indices[j]`` and fills its
    rows ``[n, padded)`` with its pad, for every given source in **one** kernel launch. The kernel reads
    the rows of host sources in place from a ring of ``STAGING_RING`` host buffers (pinned on CUDA), and its
    table from there too on the CPU; on CUDA a graph per ring buffer uploads the table and launches the
    kernel (one replay). A call only writes each source's address and stride (and copies host rows) into
    the ring buffer. A ring buffer is reused once the copy that read it has completed. Where the kernel
    cannot apply (a row that is not one contiguous run of bytes, elements wider than 8 bytes, a device
    Triton does not run on) that source falls back to ``copy_`` + ``fill_`` with identical bytes.

    ``staged``: host sources travel through the ring (default on CUDA; on the CPU, tests ask for it).
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
        self._cuda = self._device.type == "cuda"
        self.staged = self._cuda or bool(staged)  # a kernel on CUDA reads host rows from pinned memory only
        # per destination, fixed: row bytes, row shape and contiguous strides (fast source check), word
        self._row_bytes = [rc.row_bytes(d) for d in self.dsts]
        self._row_strides = [_contiguous_strides(d.shape[1:]) for d in self.dsts]
        self._dst_word = [
            _word(d.data_ptr(), d.stride(0) * d.element_size(), b) for d, b in zip(self.dsts, self._row_bytes)
        ]
        self._max_rows = max((d.shape[0] for d in self.dsts), default=0)
        self._fill_flag = [0 if pad is None else HAS_FILL for pad in self.pads]
        self._esize = [d.element_size() for d in self.dsts]
        self._flat = [ok and d.dim() == 1 for ok, d in zip(self.kernel_ok, self.dsts)]
        self._host_offset: list[int] = []  # per destination: where its host rows go in a ring buffer
        self._table_bytes = (HEADER + COLS * len(self.dsts)) * 8
        offset = _aligned(self._table_bytes)
        for d, b in zip(self.dsts, self._row_bytes):
            self._host_offset.append(offset)
            offset += _aligned(d.shape[0] * b)
        self._ring_bytes = offset
        self._ring: list[torch.Tensor] = []  # made on the first kernel call
        self._tables: list[memoryview] = []
        self._graphs: list[torch.cuda.CUDAGraph | None] = []
        self._device_tables: list[torch.Tensor] = []  # CUDA: where each graph uploads its ring buffer's table
        self._events: list[torch.cuda.Event | None] = []  # one per group of ring buffers
        self._turn = 0
        self._generation = 0

    def __call__(
        self, indices: Sequence[int], srcs: Sequence[torch.Tensor], n: int, padded: int, *, checked: bool = False
    ) -> None:
        """Copy ``srcs[j][:n]`` into destination ``indices[j]`` and pad its rows ``[n, padded)``.

        ``checked``: the caller validated dtypes and shapes (the runner's inputs): skip those checks here.
        CUDA graph: call it outside a capture (it writes host memory the copy reads later, and replays a
        graph of its own).
        """
        check(len(indices) == len(srcs), "one source per destination index")
        if not checked:
            for i, src in zip(indices, srcs, strict=True):
                dst = self.dsts[i]
                check(src.dtype == dst.dtype, f"source dtype {src.dtype} != destination dtype {dst.dtype}")
                check(src.shape[1:] == dst.shape[1:], f"source rows {tuple(src.shape[1:])} != {tuple(dst.shape[1:])}")
                check(
                    src.shape[0] >= n and dst.shape[0] >= padded, f"need {n} source rows and {padded} destination rows"
                )
        if not self.use_kernel:
            input_copy_ref(srcs, [self.dsts[i] for i in indices], n, padded, [self.pads[i] for i in indices])
            return
        if not self._ring:
            self._make_ring()
        slot = self._turn % STAGING_RING
        self._turn += 1
        group, last_of_group = divmod(slot, GROUP)
        if last_of_group == 0 and self._events[group] is not None:
            self._events[group].synchronize()  # the copies that last read this group's buffers are done
        self._generation += 1
        gen, table, base = self._generation, self._tables[slot], self._ring[slot].data_ptr()
        table[0], table[1], table[2] = n, padded, gen
        fallback = []
        for i, src in zip(indices, srcs, strict=True):
            if not (self._flat[i] or self._kernel_can_read(i, src)):  # 1-D buffers: every row is one element
                fallback.append((i, src))
                continue
            if self.staged and src.is_cpu:  # host rows travel in the ring buffer
                rows = src if src.is_contiguous() else src[:n].contiguous()
                src_addr, src_stride = base + self._host_offset[i], self._row_bytes[i]
                ctypes.memmove(src_addr, rows.data_ptr(), n * src_stride)
            else:
                src_addr, src_stride = src.data_ptr(), src.stride(0) * self._esize[i]
            word = self._dst_word[i]
            if (src_addr | src_stride) & (word - 1):  # a source less aligned than its destination
                word = min(word, _word(src_addr, src_stride))
            e = HEADER + COLS * i
            table[e + ACTIVE], table[e + SRC], table[e + SRC_STRIDE], table[e + FLAGS] = (
                gen, src_addr, src_stride, word | self._fill_flag[i],
            )  # fmt: skip
        if len(fallback) < len(srcs):
            if self._cuda:
                self._graphs[slot].replay()
            else:
                _copy_in_kernel[(len(self.dsts), padded)](base, BLOCK=BLOCK)
            self.launches += 1
        if self._cuda and last_of_group == GROUP - 1:
            self._events[group].record()  # after this group's last copy (or its skipped launch)
        if fallback:
            input_copy_ref(
                [s for _, s in fallback],
                [self.dsts[i] for i, _ in fallback],
                n,
                padded,
                [self.pads[i] for i, _ in fallback],
            )

    def _kernel_can_read(self, i: int, src: torch.Tensor) -> bool:
        """Each row of ``src`` is one run of bytes (contiguous row strides, checked fast, or any strides
        that amount to it) and destination ``i`` suits the kernel."""
        if not self.kernel_ok[i]:
            return False
        return src.dim() == 1 or src.stride()[1:] == self._row_strides[i] or src[0].is_contiguous()

    def _make_ring(self) -> None:
        """The ring buffers with every destination's fixed entries written once, and on CUDA one captured
        launch per buffer (grid: every destination x every row; rows past ``padded`` return at once)."""
        self._events = [torch.cuda.Event() if self._cuda else None for _ in range(STAGING_RING // GROUP)]
        for _ in range(STAGING_RING):
            buf = torch.zeros(self._ring_bytes, dtype=torch.uint8, pin_memory=self._cuda)
            table = memoryview(buf.numpy()).cast("q")
            for i, (d, pad) in enumerate(zip(self.dsts, self.pads)):
                e = HEADER + COLS * i
                table[e + DST], table[e + ROW_BYTES] = d.data_ptr(), self._row_bytes[i]
                table[e + DST_STRIDE] = d.stride(0) * d.element_size()
                table[e + FILL] = 0 if pad is None else rc.fill_pattern(pad, d.dtype)
            self._ring.append(buf)
            self._tables.append(table)
            self._graphs.append(self._capture(buf) if self._cuda else None)

    def _capture(self, buf: torch.Tensor) -> torch.cuda.CUDAGraph:
        """One graph: the table's upload (a few hundred bytes: every program reading it from host memory
        over the bus measured 20-40 us) and the kernel on the uploaded copy. Host rows are read in place."""
        device_table = torch.zeros(self._table_bytes, dtype=torch.uint8, device=self._device)
        self._device_tables.append(device_table)
        grid = (len(self.dsts), self._max_rows)
        stream = torch.cuda.Stream(self._device)
        stream.wait_stream(torch.cuda.current_stream(self._device))
        with torch.cuda.stream(stream):
            _copy_in_kernel[grid](device_table.data_ptr(), BLOCK=BLOCK)  # compiles here; padded is 0: a no-op
            graph = torch.cuda.CUDAGraph()
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                device_table.copy_(buf[: self._table_bytes], non_blocking=True)
                _copy_in_kernel[grid](device_table.data_ptr(), BLOCK=BLOCK)
            finally:
                graph.capture_end()
        torch.cuda.current_stream(self._device).wait_stream(stream)
        return graph


def _contiguous_strides(row_shape: Sequence[int]) -> tuple[int, ...]:
    """The element strides of a contiguous row of ``row_shape``."""
    strides, step = [], 1
    for size in reversed(row_shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


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
