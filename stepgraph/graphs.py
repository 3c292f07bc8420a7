"""Low-level CUDA graph helpers shared by the capture backend and splicing: the collector kept out of
captures, host syncs made errors, trivial captures (pool anchor, generator repair), safe teardown.

Nothing here knows about keys, runners or steps.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def frozen_gc() -> Iterator[None]:
    """No garbage collection while capturing: collect first, then freeze and disable the collector.

    A collection during a capture can destroy an unreachable old graph (a dropped runner's, say), and
    CUDA refuses a graph's destruction while a stream captures: the capture fails. Every capture in the
    package goes through here: a key's (``capture()``, ``warmup()``, on first use in ``run()``), a spliced
    stage's, the staging ring's and the trivial ones below. Re-entrant: an inner use, or one under a
    collector the caller disabled, changes nothing.
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


@contextmanager
def sync_debug_error() -> Iterator[None]:
    """Make host syncs raise inside this block (a step's last warm-up), so a step that synchronises fails
    there with the offending operation named instead of invalidating the capture. The mode is
    process-wide, so it is skipped while a NCCL process group is up (its background threads use CUDA)."""
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


def trivial_capture(
    device: torch.device, stream: torch.cuda.Stream, pool: object | None = None
) -> torch.cuda.CUDAGraph:
    """A graph of one kernel on a tensor allocated outside it (on ``pool`` when given, which it holds
    until reset)."""
    scratch = torch.zeros(1, device=device)
    graph = torch.cuda.CUDAGraph()
    stream.wait_stream(torch.cuda.current_stream(device))
    with frozen_gc(), torch.cuda.stream(stream):
        graph.capture_begin(pool=pool, capture_error_mode="relaxed")
        try:
            scratch.add_(1)
        finally:
            graph.capture_end()
    return graph


def restore_generator(device: torch.device, stream: torch.cuda.Stream) -> None:
    """Take the default CUDA generator out of capture mode after a failed capture.

    ``CUDAGraph.capture_end`` can raise before its RNG epilogue (CUDA rejected the capture, or torch's own
    checks failed), which leaves the generator "capturing": every later random op in the process then
    fails with "Offset increment outside graph capture encountered unexpectedly". Capturing one trivial
    kernel runs the generator's capture prologue and epilogue again, which leaves it out of capture mode
    whatever state it was in (the same thing a later successful capture does).
    """
    trivial_capture(device, stream).reset()


def discard_graph(graph: torch.cuda.CUDAGraph) -> None:
    """Reset ``graph``; a graph whose capture failed may refuse, and then there is nothing else to free."""
    with contextlib.suppress(Exception):
        graph.reset()


@functools.cache
def keeps_graphs() -> bool:
    """Whether this torch keeps a captured graph's ``cudaGraph_t`` (``CUDAGraph(keep_graph=True)``, torch
    >= 2.8), which a captured graph's launch together with the input copy needs
    (:mod:`stepgraph.copy_in`). Call it only where CUDA is available."""
    try:
        torch.cuda.CUDAGraph(keep_graph=True)
    except (TypeError, RuntimeError):
        return False
    return True
