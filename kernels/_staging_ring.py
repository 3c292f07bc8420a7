"""The staging ring of a copy-in plan: host buffers that carry a run's copy table (and the rows of host
sources) to the device, and the two ways a copy gets there.

* **Its own launch**: one captured graph per ring buffer uploads that buffer's table and runs the copy
  kernel on it (:meth:`StagingRing.launch`).
* **A ticket**: a step's graph captured with :meth:`StagingRing.graph_copy` starts with a fetch that
  reads a pinned mailbox word. The host posts the address of the run's ring buffer there just before it
  replays that graph (:meth:`StagingRing.post`); the fetch uploads the table and sets the word back to 0,
  and the copy runs as the graph's second kernel. A run with new inputs then costs one launch, not two.
  The host posts only into an empty mailbox: a ticket not yet fetched (its graph still queued behind
  other work) is waited for, and so is one before a replay that posts nothing (that replay, on another
  stream, could otherwise fetch it).

A ring buffer is reused once the copy that read it has completed: one event per group of buffers.
On the CPU the same code runs through Triton's interpreter, without graphs or events.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import triton

from ._copy_in_kernel import BLOCK, _copy_in_kernel, _fetch_table_kernel, _fetch_ticket_kernel
from ._driver import DriverCalls

# Host buffers in rotation. With an overlapped loop two steps are in flight, so a ring of 2 made the host
# wait for a copy still queued behind them (a bubble at every batch change, seen at B=8 on the H200). The
# ring is 16 deep in groups of 4 sharing one event (recording and waiting on an event cost about 2 us of
# host time each; once per 4 copies here).
STAGING_RING = 16
GROUP = 4
# A ticket not fetched after this long means its graph never started (a stream waiting on the host, say)
TICKET_TIMEOUT_S = 60.0


class StagingRing:
    """``STAGING_RING`` host buffers of ``size`` bytes (pinned on CUDA), each starting with a copy table
    of ``table_bytes`` whose fixed entries ``fill_fixed(table)`` writes once (``table``: an int64
    memoryview of the buffer). ``fields`` x ``rows``: the copy kernel's largest grid.

    A call takes a buffer (:meth:`take`), writes its entries and host rows through ``raw[slot]`` (a byte
    memoryview; ``bases[slot]`` is its address), then either :meth:`launch` es it or :meth:`post` s it to a
    graph, and :meth:`close` s it.
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
        # the mailbox of graphs captured with graph_copy(), and the device table their fetch writes
        self._box = torch.zeros(2, dtype=torch.int64, pin_memory=self._cuda)
        self._mail = memoryview(self._box.numpy()).cast("B").cast("q")
        self._graph_table = torch.zeros(table_bytes, dtype=torch.uint8, device=device)
        self._events = [torch.cuda.Event() if self._cuda else None for _ in range(STAGING_RING // GROUP)]
        self._driver = DriverCalls(device) if self._cuda else None  # the copy's launch, the events' records
        self._graphs: list[torch.cuda.CUDAGraph | None] = []
        self._device_tables: list[torch.Tensor] = []  # where each copy graph uploads its buffer's table
        if self._cuda:
            self._compile()
            self._graphs = [self._capture(buf) for buf in self.buffers]
        self._turn = 0
        self.tickets = 0  # copies that travelled in a step's graph (for tests and benchmarks)

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

    def post(self, slot: int, replay: Callable[[], None]) -> None:
        """The copy of buffer ``slot`` as a ticket to the graph ``replay()`` launches (captured with
        :meth:`graph_copy`). A ``replay`` that raises takes its ticket back."""
        self.settle()
        self._mail[0] = self.bases[slot]
        try:
            replay()
        except BaseException:
            self._mail[0] = 0  # never launched: no fetch will consume it
            raise
        self.tickets += 1

    def settle(self) -> None:
        """Wait until the mailbox is empty: every ticket posted so far has been fetched on the device."""
        mail = self._mail
        if not mail[0]:
            return
        deadline = time.monotonic() + TICKET_TIMEOUT_S
        while mail[0]:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the input copy posted to a step's graph was not fetched within {TICKET_TIMEOUT_S:.0f} s: "
                    "that graph has not started on the device (is its stream waiting on the host?); set "
                    "STEPGRAPH_COPY_IN_GRAPH=0 to launch copies on their own"
                )
            time.sleep(0)

    def close(self, slot: int | None) -> None:
        """After the launch (or the replay) that read buffer ``slot``; ``None``: nothing was taken."""
        if self._cuda and slot is not None and slot % GROUP == GROUP - 1:
            self._driver.record(self._events[slot // GROUP])  # after this group's last copy

    # ---- inside a step's capture -----------------------------------------------------------------
    def graph_copy(self, rows: int) -> None:
        """Launch the fetch of a posted ticket and the copy it describes over ``rows`` rows: the first
        kernels of a step's graph, whose replays then take copies through :meth:`post`. Eagerly (a
        warm-up, the CPU) it copies a posted ticket at once, or does nothing."""
        table = self._graph_table.data_ptr()
        _fetch_ticket_kernel[(1,)](self._box.data_ptr(), table, self._words, WORDS=self._fetch_words)
        _copy_in_kernel[(self.fields, rows)](table, BLOCK=BLOCK)

    # ---- made once -------------------------------------------------------------------------------
    def _compile(self) -> None:
        """Compile every kernel here, outside any capture: fetches of 0 words and a copy of 0 rows."""
        table = self._graph_table.data_ptr()
        _fetch_ticket_kernel[(1,)](self._box.data_ptr(), table, 0, WORDS=self._fetch_words)
        _fetch_table_kernel[(1,)](self.bases[0], table, 0, WORDS=self._fetch_words)
        _copy_in_kernel[(self.fields, 1)](table, BLOCK=BLOCK)

    def _capture(self, buf: torch.Tensor) -> torch.cuda.CUDAGraph:
        """One graph: the table's upload by a one-program kernel (a few hundred bytes; every copy program
        reading the table from host memory over the bus measured 20-40 us, and with a memcpy node a run with
        new inputs took 4-5 us more host time, run 17) and the kernel on the uploaded copy.
        Host rows are read in place."""
        device_table = torch.zeros(self._words * 8, dtype=torch.uint8, device=self.device)
        self._device_tables.append(device_table)
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            graph = torch.cuda.CUDAGraph()
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                _fetch_table_kernel[(1,)](buf.data_ptr(), device_table.data_ptr(), self._words, WORDS=self._fetch_words)
                _copy_in_kernel[(self.fields, self.rows)](device_table.data_ptr(), BLOCK=BLOCK)
            finally:
                graph.capture_end()
        torch.cuda.current_stream(self.device).wait_stream(stream)
        return graph
