"""Splice pre-captured per-stage graphs into an enclosing capture, as child graph nodes.

``g.replay()`` inside another capture is refused by CUDA and torch. A graph captured with
``torch.cuda.CUDAGraph(keep_graph=True)`` (torch >= 2.8) keeps its ``cudaGraph_t``, which can be added
to the enclosing capture with ``cudaGraphAddChildGraphNode`` (cuda-python, the ``splice`` extra); the
capture stream then depends on the new node. Outside a capture, splicing simply replays the stage.

Rules this module enforces:

* support: torch with ``keep_graph``, cuda-python importable, and PyTorch's native allocator (graphs
  captured under ``cudaMallocAsync`` hold allocation nodes, which a child graph must not have);
* lifetime: a stage's graph and pool stay alive while any parent holds it (the runner hands a key's
  stages to the capture, which holds them); releasing it before its parents are released raises
  :class:`~stepgraph.errors.ReleasedError`;
* randomness: a child gets no torch RNG prologue, so a stage that draws from torch's generator would
  repeat its numbers on every launch. Such a stage is detected (the generator's offset moves during its
  warm-up) and refused. Kernels that keep their random offsets on the device (stepgraph's sampling
  kernel) are fine.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from stepgraph.errors import ReleasedError, StepGraphError
from stepgraph.graphs import frozen_gc, restore_generator


class SpliceError(StepGraphError):
    """Splicing is unsupported here, or a stage cannot be spliced; the message says why."""


def support() -> tuple[bool, str]:
    """``(True, "")`` when graphs can be spliced in this process, else ``(False, reason)``."""
    if not torch.cuda.is_available():
        return False, "CUDA is not available"
    try:
        torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError:
        return False, f"torch {torch.__version__} has no CUDAGraph(keep_graph=True); splicing needs torch >= 2.8"
    try:
        from cuda.bindings import runtime  # noqa: F401
    except ImportError:
        return False, "cuda-python is not installed; pip install 'stepgraph[splice]'"
    backend = torch.cuda.get_allocator_backend()
    if backend != "native":
        return False, (
            f"the CUDA allocator backend is {backend!r}: its graphs contain allocation nodes, which child graphs "
            "must not have; unset PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync"
        )
    return True, ""


def _require_support() -> None:
    ok, why = support()
    if not ok:
        raise SpliceError(f"cannot splice graphs: {why}")


def _rt():
    from cuda.bindings import runtime

    return runtime


def _check(result, what: str):
    rt = _rt()
    err = result[0] if isinstance(result, tuple) else result
    if err != rt.cudaError_t.cudaSuccess:
        raise SpliceError(f"{what} failed: {err}")
    return result[1:] if isinstance(result, tuple) else ()


class StageGraph:
    """One stage captured on its own with ``keep_graph=True``, ready to be spliced into a parent.

    Parameters
    ----------
    fn:
        The stage: graph-safe, over static tensors; its return value (tensors) stays alive with the stage.
    name:
        For messages and the report.
    pool, stream:
        Memory pool and capture stream (a runner passes its shared ones).
    warmup:
        Eager runs before capture; the last one checks that the stage does not draw from torch's generator.
    """

    def __init__(
        self, fn: Callable[[], object], *, name: str = "stage", pool=None, stream=None, warmup: int = 2
    ) -> None:
        _require_support()
        self.name = name
        self.parents = 0
        self.released = False
        stream = stream or torch.cuda.Stream()
        gen = torch.cuda.default_generators[torch.cuda.current_device()]
        current = torch.cuda.current_stream()
        stream.wait_stream(current)
        with torch.cuda.stream(stream):
            for i in range(warmup):
                before = gen.get_offset()
                fn()
                if i == warmup - 1 and gen.get_offset() != before:
                    raise SpliceError(
                        f"stage {name!r} draws random numbers from torch's generator (its offset moved during "
                        "warm-up); as a spliced child it would repeat them on every launch. Keep its randomness on "
                        "the device (stepgraph's sampling kernel: STEPGRAPH_TWO_LAUNCH_SAMPLING=1) or capture it "
                        "directly instead of splicing it"
                    )
        current.wait_stream(stream)
        torch.cuda.synchronize()
        reserved0 = torch.cuda.memory_reserved()
        t0 = time.perf_counter()
        self.graph = torch.cuda.CUDAGraph(keep_graph=True)
        try:
            with frozen_gc(), torch.cuda.graph(self.graph, pool=pool, stream=stream):
                self.outputs = fn()
        except Exception:
            restore_generator(torch.device("cuda", torch.cuda.current_device()), stream)
            raise
        self.graph.instantiate()
        self.graph.replay()  # prime: the outputs hold real values for whoever warms up next
        torch.cuda.synchronize()
        self.seconds = time.perf_counter() - t0
        self.pool_bytes = max(0, torch.cuda.memory_reserved() - reserved0)

    def hold(self) -> None:
        """A parent graph that contains this stage was captured (its capture backend calls this)."""
        self.parents += 1

    def unhold(self) -> None:
        """A parent graph that contains this stage was discarded."""
        self.parents -= 1

    def replay(self) -> None:
        if self.released:
            raise ReleasedError(f"stage {self.name!r} was released")
        self.graph.replay()

    def release(self) -> None:
        """Free the stage's graph. Refused while a live parent graph holds it."""
        if self.parents > 0:
            raise ReleasedError(
                f"stage {self.name!r} is held by {self.parents} live parent graph(s); release them first "
                "(runner.release()), then the stage"
            )
        if not self.released:
            self.graph.reset()
            self.outputs = None
            self.released = True

    def info(self) -> dict:
        return {
            "name": self.name,
            "pool_bytes": self.pool_bytes,
            "capture_ms": round(self.seconds * 1e3, 3),
            "parents": self.parents,
        }


def splice(stage: StageGraph) -> None:
    """Add ``stage`` at the current point of the enclosing capture (outside a capture: replay it).

    CUDA graph: inside a capture on the current stream, adds a child graph node depending on the
    stream's current capture dependencies and makes everything captured afterwards depend on it.
    """
    if stage.released:
        raise ReleasedError(f"stage {stage.name!r} was released; capture it again")
    if not torch.cuda.is_current_stream_capturing():
        stage.replay()
        return
    rt = _rt()
    stream = rt.cudaStream_t(init_value=torch.cuda.current_stream().cuda_stream)
    info = _check(rt.cudaStreamGetCaptureInfo(stream), "cudaStreamGetCaptureInfo")
    # CUDA 12: (status, id, graph, deps, n); CUDA 13: (status, id, graph, deps, edge_data, n)
    graph, deps, n = info[2], info[3], info[-1]
    child = rt.cudaGraph_t(init_value=stage.graph.raw_cuda_graph())
    (node,) = _check(rt.cudaGraphAddChildGraphNode(graph, deps, n, child), "cudaGraphAddChildGraphNode")
    flags = rt.cudaStreamUpdateCaptureDependenciesFlags.cudaStreamSetCaptureDependencies
    try:
        _check(
            rt.cudaStreamUpdateCaptureDependencies(stream, [node], None, 1, flags),
            "cudaStreamUpdateCaptureDependencies",
        )
    except TypeError:  # CUDA 12 bindings: no edge-data argument
        _check(rt.cudaStreamUpdateCaptureDependencies(stream, [node], 1, flags), "cudaStreamUpdateCaptureDependencies")
