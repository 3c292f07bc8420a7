"""Capture one key as a CUDA graph on the runner's shared pool and capture stream.

Rules (the sharp edges of CUDA graphs in PyTorch, found in its issue tracker and here):

* one pool handle and one side stream for every key; warm-ups run on that same stream, before the
  capture, so Triton compiles, cuBLAS handles and allocator blocks happen outside it;
* the last warm-up runs with ``torch.cuda.set_sync_debug_mode("error")``, so a step that synchronises
  the host fails there with the name of the offending operation instead of invalidating the capture;
* graphs are kept (``keep_graph=True``, torch >= 2.8) so that the input copy's graph and a key's can be
  made one launch (``Captured.fused``, closed with the graph); the warm-up finds out whether the step
  draws from torch's generators, which rules that out; ``instantiate`` makes the executable graph after
  the capture, so the key table reports its cost apart;
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

import gc
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import torch

from stepgraph.errors import CaptureError, classify_capture_exception
from stepgraph.graphs import (
    discard_graph,
    frozen_gc,
    keeps_graphs,
    restore_generator,
    sync_debug_error,
    trivial_capture,
)
from stepgraph.memory import MemoryReader, TorchMemoryReader

StepOutputsDict = Mapping[str, torch.Tensor]


class Child(Protocol):
    """A pre-captured graph spliced into a key's graph (:class:`stepgraph.splice.StageGraph`): a parent
    holds it while alive."""

    pool_bytes: int
    seconds: float

    def hold(self) -> None: ...

    def unhold(self) -> None: ...

    def info(self) -> dict: ...


class Replayable(Protocol):
    def replay(self) -> None: ...

    def reset(self) -> None: ...


@dataclass
class Captured:
    """A captured key: replaying ``graph`` rewrites ``outputs`` in place (once instantiated)."""

    graph: Replayable
    outputs: dict[str, torch.Tensor]
    seconds: float
    pool_bytes: int
    children: list[Child] = field(default_factory=list)  # spliced graphs this one holds (stepgraph.splice)
    draws_rng: bool = False  # the step drew from torch's generators in its warm-up: replays need the prologue
    fused: object = None  # the input copy and this graph as one launch (FusedLaunch); False: none to be had
    instantiate_seconds: float = 0.0  # its executable graph and fused launch made

    def replay(self) -> None:
        self.graph.replay()

    def close_fused(self) -> None:
        if self.fused:
            self.fused.close()
        self.fused = None


class WarmupRun(NamedTuple):
    """What a key's eager warm-up found: the peak bytes it allocated beyond what was there, and whether it
    drew from torch's default CUDA generators (its graph then needs ``replay()``'s generator prologue, so it
    is never launched fused with the input copy)."""

    peak_bytes: int
    draws_rng: bool = False


def _generator_offsets() -> list[int]:
    """The offsets of torch's default CUDA generators (a step that draws numbers advances one)."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return []
    return [g.get_offset() for g in torch.cuda.default_generators]


class GraphBackend(Protocol):
    """What a runner needs from a graph implementation (CUDA graphs here; a simulated one in tests).

    ``warmup`` runs the step eagerly on the capture stream (a :class:`WarmupRun`); ``capture`` returns a
    :class:`Captured` or raises :class:`~stepgraph.errors.CaptureError` (holding nothing); ``instantiate``
    makes a captured graph launchable;
    ``discard`` tears one graph down (its memory stays in the pool), ``release`` every graph and the pool.
    ``pool()`` and ``stream`` are shared with graphs captured beside the runner's (splice stages).
    """

    reader: MemoryReader
    stream: object

    def pool(self) -> object: ...

    def warmup(self, fn: Callable[[], StepOutputsDict], iters: int) -> WarmupRun: ...

    def capture(self, fn: Callable[[], StepOutputsDict], children: Sequence[Child] = ()) -> Captured: ...

    def instantiate(self, captured: Captured) -> None: ...

    def discard(self, captured: Captured) -> None: ...

    def release(self, captured: list[Captured]) -> None: ...


def graphs_unavailable_reason(device: torch.device) -> str | None:
    """Why CUDA graphs cannot be used on ``device`` (``None`` when they can)."""
    if device.type != "cuda":
        return f"buffers are on {device.type}; CUDA graphs need a CUDA device (the step runs eagerly)"
    if not torch.cuda.is_available():
        return "CUDA is not available in this process (torch built without CUDA or no GPU visible)"
    return None


class CudaGraphBackend:
    """Shared pool + capture stream for one runner (one device); a :class:`GraphBackend`."""

    name = "cuda"

    def __init__(
        self, device: torch.device, *, capture_error_mode: str = "thread_local", keep_graph: bool | None = None
    ) -> None:
        self.device = device
        self.capture_error_mode = capture_error_mode
        # kept graphs can be launched together with the input copy (stepgraph.copy_in.InputCopyPlan.fuse)
        self.keep_graph = keeps_graphs() if keep_graph is None else keep_graph
        self.stream = torch.cuda.Stream(device=device)
        self._pool = None
        self._anchor: torch.cuda.CUDAGraph | None = None
        self.reader: MemoryReader = TorchMemoryReader(device)

    def pool(self) -> object:
        """The shared pool's handle for ``capture_begin(pool=...)`` (made on first use, held until release)."""
        if self._pool is None:
            pool = torch.cuda.graph_pool_handle()
            self._anchor = trivial_capture(self.device, self.stream, pool)
            self._pool = pool
        return self._pool

    def warmup(self, fn: Callable[[], StepOutputsDict], iters: int) -> WarmupRun:
        """Run ``fn`` ``iters`` times on the capture stream, the last with host syncs raising; return the
        peak extra bytes it allocated and whether it drew from torch's generators. A last run that syncs is
        given one more unguarded run and then a guarded one, once: what happens only on a first use (Triton
        autotuning, torch.compile, a lazy initialisation) may synchronise, and with ``iters=1`` the guarded
        run is that first use."""
        torch.cuda.synchronize(self.device)
        offsets = _generator_offsets()
        base = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            for _ in range(iters - 1):
                fn()
            try:
                with sync_debug_error():
                    fn()
            except RuntimeError as e:
                if iters > 1 or classify_capture_exception(e)[0] != "host_sync":
                    raise
                fn()
                with sync_debug_error():
                    fn()
        current.wait_stream(self.stream)
        torch.cuda.synchronize(self.device)
        peak = max(0, torch.cuda.max_memory_allocated(self.device) - base)
        return WarmupRun(peak, _generator_offsets() != offsets)

    def capture(self, fn: Callable[[], StepOutputsDict], children: Sequence[Child] = ()) -> Captured:
        """Capture ``fn`` into a new graph on the shared pool (not instantiated: see :meth:`instantiate`);
        the graph holds ``children`` (spliced into it by ``fn``) until discarded. Raises
        :class:`CaptureError`."""
        torch.cuda.synchronize(self.device)
        reserved0 = torch.cuda.memory_reserved(self.device)
        graph = torch.cuda.CUDAGraph(keep_graph=True) if self.keep_graph else torch.cuda.CUDAGraph()
        t0 = time.perf_counter()
        failure: tuple[str, str, str] | None = None
        outputs = None
        with frozen_gc(), torch.cuda.stream(self.stream):  # the runner's paths froze it already: a no-op
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
            discard_graph(graph)
            restore_generator(self.device, self.stream)
            torch.cuda.synchronize(self.device)
            cause, hint, text = failure
            raise CaptureError(f"{hint}. Cause: {text}", cause=cause)
        torch.cuda.synchronize(self.device)
        seconds = time.perf_counter() - t0
        pool_bytes = max(0, torch.cuda.memory_reserved(self.device) - reserved0)
        for child in children:
            child.hold()
        return Captured(graph, dict(outputs), seconds, pool_bytes, list(children))

    def instantiate(self, captured: Captured) -> None:
        """Make ``captured``'s executable graph (a kept graph's; the capture made the others')."""
        if self.keep_graph:
            with torch.cuda.device(self.device):
                captured.graph.instantiate()

    @staticmethod
    def discard(captured: Captured) -> None:
        """Tear one graph down; its blocks stay in the shared pool for the next capture."""
        captured.outputs.clear()
        captured.close_fused()
        discard_graph(captured.graph)
        for child in captured.children:
            child.unhold()
        captured.children.clear()

    def release(self, captured: list[Captured]) -> None:
        """Tear every graph down and drop the pool; reserved memory returns once nothing references it."""
        for c in captured:
            self.discard(c)
        captured.clear()
        if self._anchor is not None:
            discard_graph(self._anchor)  # the pool's last user: its blocks become free for empty_cache below
        self._anchor, self._pool = None, None
        gc.collect()
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()


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
