"""The staging ring of a copy-in plan: host buffers that carry a run's copy table (and the rows of host
sources) to the device.

Each of ``STAGING_RING`` buffers (pinned on CUDA) starts with a copy table; on CUDA one captured graph
uploads the next buffer's table and runs the copy kernel on it, so a copy costs one graph launch, and a
key's graph can follow it in that same launch (:meth:`StagingRing.fuse`). A buffer is reused once the
copy that read it has completed: one event per group of buffers. On the CPU the kernel reads the buffer
in place through Triton's interpreter, without graphs or events.

(A run's copy carried by every replay of the key's graph instead, fetched by its first kernel from a
pinned mailbox, was measured and not kept: one launch less per run with new inputs, but about 6 us more
device time on every replay without them. A fused launch is a second executable graph, so replays
without new inputs stay as they were.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import triton

from stepgraph.graphs import frozen_gc, keeps_graphs
from stepgraph.kernels.copy_in import BLOCK, copy_in_kernel, fetch_table_kernel

from .driver import DriverCalls

# Host buffers in rotation. With an overlapped loop two steps are in flight, so a ring of 2 made the host
# wait for a copy still queued behind them (a bubble at every batch change, seen at B=8 on the H200). The
# ring is 16 deep in groups of 8 sharing one event (recording and waiting on one cost about 1 us of host
# time each; once per 8 copies here), so a buffer is reused 9 copies or more after its last.
STAGING_RING = 16
GROUP = 8


class StagingRing:
    """``STAGING_RING`` host buffers of ``size`` bytes (one pinned allocation on CUDA), each starting with a
    copy table of ``table_bytes`` whose fixed entries ``fill_fixed(table, base)`` writes once (``table``: an
    int64 memoryview of the buffer, ``base``: its address). ``fields`` x ``rows``: the copy kernel's
    largest grid.

    A call takes the next buffer (:meth:`take`), writes its entries and host rows through ``raw[slot]`` (a
    byte memoryview) or ``words[slot]`` (the same, as int64 words; ``bases[slot]`` is its address) and
    launches the copy (:meth:`launch`). On CUDA one captured graph serves every buffer: its first kernel
    picks the buffer by a device counter of the copies fetched (see ``fetch_table_kernel``), which the
    host mirrors in ``turn``; a buffer taken and not launched (a call refused, a staged copy dropped) is
    simply taken again by the next call.
    :meth:`fuse` makes the copy and a key's graph one launch.
    """

    def __init__(
        self,
        device: torch.device,
        size: int,
        table_bytes: int,
        fill_fixed: Callable[[memoryview, int], None],
        fields: int,
        rows: int,
    ) -> None:
        self.device, self.fields, self.rows, self.size = device, fields, rows, size
        self._cuda = device.type == "cuda"
        self._words = table_bytes // 8
        self._fetch_words = triton.next_power_of_2(self._words)
        self.memory = torch.zeros(STAGING_RING * size, dtype=torch.uint8, pin_memory=self._cuda)
        whole = memoryview(self.memory.numpy())
        self.raw = [whole[s * size : (s + 1) * size] for s in range(STAGING_RING)]  # each buffer's bytes
        self.bases = [self.memory.data_ptr() + s * size for s in range(STAGING_RING)]  # each buffer's address
        self.words = [raw.cast("q") for raw in self.raw]
        for words, base in zip(self.words, self.bases):
            fill_fixed(words, base)
        self.turn = 0  # copies launched; the next call's buffer is turn % STAGING_RING
        self._events = [torch.cuda.Event() if self._cuda else None for _ in range(STAGING_RING // GROUP)]
        self._driver = DriverCalls(device) if self._cuda else None  # the launches, the events' records
        self._graph: torch.cuda.CUDAGraph | None = None
        if self._cuda:
            self._counter = torch.zeros(1, dtype=torch.int64, device=device)
            self._device_table = torch.zeros(self._words * 8, dtype=torch.uint8, device=device)
            self._graph = self._capture()
            self._graph_exec = getattr(self._graph, "raw_cuda_graph_exec", lambda: None)()

    def copies_fetched(self) -> int:
        """The device's count of copies fetched (read back: a host sync; for tests and diagnostics). It
        equals :attr:`turn` whenever no launch is in doubt."""
        return int(self._counter.item()) if self._cuda else self.turn

    @property
    def driver_refusals(self) -> int:
        """Calls the CUDA driver refused (each went through torch instead)."""
        return 0 if self._driver is None else self._driver.refusals

    # ---- a call ----------------------------------------------------------------------------------
    def take(self) -> int:
        """The next buffer, once the copies that last read its group have completed."""
        slot = self.turn % STAGING_RING
        group, place = divmod(slot, GROUP)
        if place == 0 and self._events[group] is not None:
            self._events[group].synchronize()
        return slot

    def launch(self, slot: int, padded: int, then: FusedLaunch | None = None) -> bool:
        """The copy of buffer ``slot`` (the one :meth:`take` gave): one graph launch on CUDA, followed in
        the same launch by a key's graph when ``then`` (from :meth:`fuse`) is given and the driver takes
        it. Returns whether ``then`` ran."""
        if not self._cuda:
            copy_in_kernel[(self.fields, padded)](self.bases[slot], BLOCK=BLOCK)
            self.turn += 1
            return False
        fused = then is not None and self._driver.launch_exec(then.handle)
        if not fused:
            self._driver.launch(self._graph, self._graph_exec)
        self.turn += 1  # counted once launched: a launch that raised left the device's counter alone
        if slot % GROUP == GROUP - 1:
            self._driver.record(self._events[slot // GROUP])  # after this group's last copy
        return fused

    def fuse(self, graph: torch.cuda.CUDAGraph) -> FusedLaunch | None:
        """One executable graph: this ring's copy, then ``graph`` (captured with ``keep_graph=True``, drawing
        no numbers from torch's generators: its launch skips ``replay()``'s generator prologue). ``None``
        where that cannot be made (no driver, torch without kept graphs): the two launch apart."""
        if not self._cuda or not hasattr(graph, "raw_cuda_graph"):
            return None
        try:
            with torch.cuda.device(self.device):  # instantiated in this device's context, whatever is current
                handle = self._driver.fuse(self._graph.raw_cuda_graph(), graph.raw_cuda_graph())
        except RuntimeError:  # not a kept graph
            return None
        return None if handle is None else FusedLaunch(handle, self)

    # ---- made once -------------------------------------------------------------------------------
    def _capture(self) -> torch.cuda.CUDAGraph:
        """One graph: the table's upload by a one-program kernel (a few hundred bytes; every copy program
        reading the table from host memory over the bus measured 20-40 us, and with a memcpy node a run with
        new inputs took 4-5 us more host time) and the kernel on the uploaded copy.
        Host rows are read in place."""
        args = (self.bases[0], self.size, self._counter.data_ptr(), self._device_table.data_ptr(), self._words)

        def launch() -> None:
            fetch_table_kernel[(1,)](*args, RING=STAGING_RING, WORDS=self._fetch_words)
            copy_in_kernel[(self.fields, self.rows)](args[3], BLOCK=BLOCK)

        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with frozen_gc(), torch.cuda.stream(stream):
            # eagerly first, with the capture's very arguments, so that both kernels compile and load here,
            # outside it (a fresh buffer's header says 0 rows: nothing is copied); then the counter back to 0
            launch()
            self._counter.zero_()
            kept = keeps_graphs()
            graph = torch.cuda.CUDAGraph(keep_graph=True) if kept else torch.cuda.CUDAGraph()
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                launch()
            finally:
                graph.capture_end()
            if kept:
                graph.instantiate()
        torch.cuda.current_stream(self.device).wait_stream(stream)
        return graph


class FusedLaunch:
    """An executable graph made by :meth:`StagingRing.fuse`: the ring's copy, then a key's graph. Holds the
    ring (whose memory the copy reads) until :meth:`close`, which its owner calls when the key's graph
    goes."""

    def __init__(self, handle: int, ring: StagingRing) -> None:
        self.handle, self._ring = handle, ring

    def close(self) -> None:
        if self.handle:
            self._ring._driver.destroy_exec(self.handle)
            self.handle = 0

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
