"""Capture one key as a CUDA graph on the runner's shared pool and capture stream.

Rules (DESIGN.md, and the sharp edges in PyTorch's issue tracker):

* one pool handle and one side stream for every key; warm-ups run on that same stream, before the
  capture, so Triton compiles, cuBLAS handles and allocator blocks happen outside it;
* the last warm-up runs with ``torch.cuda.set_sync_debug_mode("error")``, so a step that synchronises
  the host fails there with the name of the offending operation instead of invalidating the capture;
* a failed capture is ended, its graph reset, and no reference to tensors it allocated survives (the
  exception text is kept, not the exception), so repeated failures do not grow ``memory_reserved``;
  leftovers in the shared pool are reused by the next capture;
* the pool is held by an *anchor*, a one-kernel graph captured on it first and reset only by
  ``release``: without it the pool's use count drops to zero when the only graph on it is reset (a
  failed first capture), and torch's allocator then refuses the next capture on that handle with an
  internal assert. (A ``torch.cuda.MemPool`` would hold it too, but its destructor empties the cache,
  which aborts the process if garbage collection runs it while any capture is underway.)
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from stepgraph.errors import CaptureError, classify_capture_exception
from stepgraph.memory import MemoryReader, TorchMemoryReader
from stepgraph.splice import collecting

StepOutputsDict = Mapping[str, torch.Tensor]


@dataclass
class Captured:
    """A captured key: replaying ``graph`` rewrites ``outputs`` in place."""

    graph: torch.cuda.CUDAGraph
    outputs: dict[str, torch.Tensor]
    seconds: float
    pool_bytes: int
    children: list = field(default_factory=list)  # spliced StageGraphs this graph holds (stepgraph.splice)

    def replay(self) -> None:
        self.graph.replay()


def graphs_unavailable_reason(device: torch.device) -> str | None:
    """Why CUDA graphs cannot be used on ``device`` (``None`` when they can)."""
    if device.type != "cuda":
        return f"buffers are on {device.type}; CUDA graphs need a CUDA device (the step runs eagerly)"
    if not torch.cuda.is_available():
        return "CUDA is not available in this process (torch built without CUDA or no GPU visible)"
    return None


@contextmanager
def frozen_gc():
    """No garbage collection while capturing: collect first, then freeze and disable the collector.

    A collection during a capture can destroy an unreachable old graph (a dropped runner's, say), and
    CUDA refuses a graph's destruction while a stream captures: the capture fails. Every capture path
    (``capture()``, ``warmup()``, capture on first use in ``run()``) goes through here. Re-entrant: an
    inner use, or one under a collector the caller disabled, changes nothing.
    """
    if not gc.isenabled():
        yield
        return
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()


class CudaGraphBackend:
    """Shared pool + capture stream for one runner (one device)."""

    name = "cuda"

    def __init__(
        self, device: torch.device, *, capture_error_mode: str = "thread_local", keep_graph: bool = False
    ) -> None:
        self.device = device
        self.capture_error_mode = capture_error_mode
        self.keep_graph = keep_graph
        self.stream = torch.cuda.Stream(device=device)
        self._pool = None
        self._anchor: torch.cuda.CUDAGraph | None = None
        self.reader: MemoryReader = TorchMemoryReader(device)

    def pool(self):
        """The shared pool's handle for ``capture_begin(pool=...)`` (made on first use, held until release)."""
        if self._pool is None:
            pool = torch.cuda.graph_pool_handle()
            self._anchor = _trivial_capture(self.device, self.stream, pool)
            self._pool = pool
        return self._pool

    def warmup(self, fn: Callable[[], StepOutputsDict], iters: int) -> int:
        """Run ``fn`` ``iters`` times on the capture stream; return the peak extra bytes it allocated."""
        torch.cuda.synchronize(self.device)
        base = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            for i in range(iters):
                if i == iters - 1:
                    with _sync_debug_error():
                        out = fn()
                else:
                    out = fn()
                del out
        current.wait_stream(self.stream)
        torch.cuda.synchronize(self.device)
        return max(0, torch.cuda.max_memory_allocated(self.device) - base)

    def capture(self, fn: Callable[[], StepOutputsDict]) -> Captured:
        """Capture ``fn`` into a new graph on the shared pool. Raises :class:`CaptureError`."""
        torch.cuda.synchronize(self.device)
        reserved0 = torch.cuda.memory_reserved(self.device)
        graph = torch.cuda.CUDAGraph(keep_graph=True) if self.keep_graph else torch.cuda.CUDAGraph()
        t0 = time.perf_counter()
        failure: tuple[str, str, str] | None = None
        outputs = None
        with torch.cuda.stream(self.stream), collecting() as children:
            graph.capture_begin(pool=self.pool(), capture_error_mode=self.capture_error_mode)
            try:
                outputs = fn()
            except Exception as e:  # noqa: BLE001 - any failure of the user's step is reported, not raised raw
                failure = (*classify_capture_exception(e), f"{type(e).__name__}: {e}")
            finally:
                try:
                    graph.capture_end()
                except Exception as e:  # noqa: BLE001
                    if failure is None:
                        failure = (*classify_capture_exception(e), f"{type(e).__name__}: {e}")
        if failure is not None:
            outputs = None
            _discard(graph)
            restore_generator(self.device, self.stream)
            torch.cuda.synchronize(self.device)
            cause, hint, text = failure
            raise CaptureError(f"{hint}. Cause: {text}", cause=cause)
        torch.cuda.synchronize(self.device)
        seconds = time.perf_counter() - t0
        if self.keep_graph:
            graph.instantiate()
        pool_bytes = max(0, torch.cuda.memory_reserved(self.device) - reserved0)
        for child in children:
            child.parents += 1
        return Captured(graph=graph, outputs=dict(outputs), seconds=seconds, pool_bytes=pool_bytes, children=children)

    @staticmethod
    def discard(captured: Captured) -> None:
        """Tear one graph down; its blocks stay in the shared pool for the next capture."""
        captured.outputs.clear()
        _discard(captured.graph)
        for child in captured.children:
            child.parents -= 1
        captured.children.clear()

    def release(self, captured: list[Captured]) -> None:
        """Tear every graph down and drop the pool; reserved memory returns once nothing references it."""
        for c in captured:
            self.discard(c)
        captured.clear()
        if self._anchor is not None:
            _discard(self._anchor)  # the pool's last user: its blocks become free for empty_cache below
        self._anchor, self._pool = None, None
        gc.collect()
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()


def restore_generator(device: torch.device, stream: torch.cuda.Stream) -> None:
    """Take the default CUDA generator out of capture mode after a failed capture.

    ``CUDAGraph.capture_end`` can raise before its RNG epilogue (CUDA rejected the capture, or torch's own
    checks failed), which leaves the generator "capturing": every later random op in the process then
    fails with "Offset increment outside graph capture encountered unexpectedly". Capturing one trivial
    kernel runs the generator's capture prologue and epilogue again, which leaves it out of capture mode
    whatever state it was in (the same thing a later successful capture does).
    """
    _trivial_capture(device, stream).reset()


def _trivial_capture(device: torch.device, stream: torch.cuda.Stream, pool=None) -> torch.cuda.CUDAGraph:
    """A graph of one kernel on a tensor allocated outside it (on ``pool`` when given, which it holds
    until reset)."""
    scratch = torch.zeros(1, device=device)
    graph = torch.cuda.CUDAGraph()
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        graph.capture_begin(pool=pool, capture_error_mode="relaxed")
        try:
            scratch.add_(1)
        finally:
            graph.capture_end()
    return graph


def _discard(graph: torch.cuda.CUDAGraph) -> None:
    # a graph whose capture failed may refuse reset; there is nothing else to free then
    with contextlib.suppress(Exception):
        graph.reset()


@contextmanager
def _sync_debug_error():
    """Make host syncs raise during the last warm-up. The mode is process-wide, so it is skipped while a
    NCCL process group is up (its background threads use CUDA too)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl":
        yield
        return
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


class capture_progress:
    """A rich progress bar over keys, only when enabled and stderr is a terminal."""

    def __init__(self, enabled: bool, total: int, name: str) -> None:
        self.enabled, self.total, self.name = enabled, total, name
        self._progress = None

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import Progress

            console = Console(stderr=True)
            if console.is_terminal:
                self._progress = Progress(console=console, transient=True)
                self._progress.start()
                self._task = self._progress.add_task(f"capturing {self.name} keys", total=self.total)

        def advance(label: str) -> None:
            if self._progress is not None:
                self._progress.update(self._task, advance=1, description=f"captured {label}")

        return advance

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()
