"""The staging ring of a copy-in plan: host buffers that carry a run's copy table (and the rows of host
sources) to the device.

Each of ``STAGING_RING`` buffers (pinned on CUDA) starts with a copy table; on CUDA one captured graph per
buffer uploads that buffer's table and runs the copy kernel on it, so a copy costs one graph launch. A
buffer is reused once the copy that read it has completed: one event per group of buffers. On the CPU
the kernel reads the buffer in place through Triton's interpreter, without graphs or events.

(A run's copy carried by the key's own graph instead, fetched by its first kernel from a pinned mailbox,
was measured in run 22: one launch less per run with new inputs, but about 6 us more device time on every
replay without them; see ``benchmarks/results/2026-11-30-h200-run22``.)
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton

from ._copy_in_kernel import BLOCK, _copy_in_kernel, _fetch_table_kernel
from ._driver import DriverCalls

# Host buffers in rotation. With an overlapped loop two steps are in flight, so a ring of 2 made the host
# wait for a copy still queued behind them (a bubble at every batch change, seen at B=8 on the H200). The
# ring is 16 deep in groups of 4 sharing one event (recording and waiting on an event cost about 2 us of
# host time each; once per 4 copies here).
STAGING_RING = 16
GROUP = 4


class StagingRing:
    """``STAGING_RING`` host buffers of ``size`` bytes (pinned on CUDA), each starting with a copy table
    of ``table_bytes`` whose fixed entries ``fill_fixed(table)`` writes once (``table``: an int64
    memoryview of the buffer). ``fields`` x ``rows``: the copy kernel's largest grid.

    A call takes a buffer (:meth:`take`), writes its entries and host rows through ``raw[slot]`` (a byte
    memoryview; ``bases[slot]`` is its address), launches the copy (:meth:`launch`) and closes the buffer
    (:meth:`close`).
    """

    def __init__(
        self,
        device: torch.device,
        size: int,
        table_bytes: int,
        fill_fixed: Callable[[memoryview], None],
        fields: int,
        rows: int,
    ) -> None:
        self.device, self.fields, self.rows = device, fields, rows
        self._cuda = device.type == "cuda"
        self._words = table_bytes // 8
        self._fetch_words = triton.next_power_of_2(self._words)
        self.buffers: list[torch.Tensor] = []
        self.raw: list[memoryview] = []  # byte view of each buffer
        self.bases: list[int] = []  # each buffer's address
        for _ in range(STAGING_RING):
            buf = torch.zeros(size, dtype=torch.uint8, pin_memory=self._cuda)
            raw = memoryview(buf.numpy())
            fill_fixed(raw.cast("q"))
            self.buffers.append(buf)
            self.raw.append(raw)
            self.bases.append(buf.data_ptr())
        self._events = [torch.cuda.Event() if self._cuda else None for _ in range(STAGING_RING // GROUP)]
        self._driver = DriverCalls(device) if self._cuda else None  # the copy's launch, the events' records
        self._graphs: list[torch.cuda.CUDAGraph | None] = []
        self._device_tables: list[torch.Tensor] = []  # where each copy graph uploads its buffer's table
        if self._cuda:
            self._graphs = [self._capture(buf) for buf in self.buffers]
        self._turn = 0

    # ---- a call ----------------------------------------------------------------------------------
    def take(self) -> int:
        """The next buffer, once the copies that last read its group have completed."""
        slot = self._turn % STAGING_RING
        self._turn += 1
        group, place = divmod(slot, GROUP)
        if place == 0 and self._events[group] is not None:
            self._events[group].synchronize()
        return slot

    def launch(self, slot: int, padded: int) -> None:
        """The copy of buffer ``slot`` as its own launch (one graph replay on CUDA)."""
        if self._cuda:
            self._driver.launch(self._graphs[slot])
        else:
            _copy_in_kernel[(self.fields, padded)](self.bases[slot], BLOCK=BLOCK)

    def close(self, slot: int | None) -> None:
        """After the launch that read buffer ``slot`` (or a staged copy dropped); ``None``: nothing taken."""
        if self._cuda and slot is not None and slot % GROUP == GROUP - 1:
            self._driver.record(self._events[slot // GROUP])  # after this group's last copy

    # ---- made once -------------------------------------------------------------------------------
    def _capture(self, buf: torch.Tensor) -> torch.cuda.CUDAGraph:
        """One graph: the table's upload by a one-program kernel (a few hundred bytes; every copy program
        reading the table from host memory over the bus measured 20-40 us, and with a memcpy node a run with
        new inputs took 4-5 us more host time, run 17) and the kernel on the uploaded copy.
        Host rows are read in place."""
        device_table = torch.zeros(self._words * 8, dtype=torch.uint8, device=self.device)
        self._device_tables.append(device_table)
        args = (buf.data_ptr(), device_table.data_ptr(), self._words)

        def launch() -> None:
            _fetch_table_kernel[(1,)](*args, WORDS=self._fetch_words)
            _copy_in_kernel[(self.fields, self.rows)](args[1], BLOCK=BLOCK)

        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            # eagerly first, with the capture's very arguments, so that both kernels compile and load here,
            # outside it (a fresh buffer's header says 0 rows: nothing is copied)
            launch()
            graph = torch.cuda.CUDAGraph()
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                launch()
            finally:
                graph.capture_end()
        torch.cuda.current_stream(self.device).wait_stream(stream)
        return graph
