"""Graph launches, event records and small uploads through the CUDA driver, for host paths that run on
every call.

Torch's Python wrappers cost more host time than the work: on the H200 machine's host a small graph's
``CUDAGraph.replay()`` took 3.0 µs against 2.2 through ``cuGraphLaunch``, and ``Event.record()`` 5.8 µs
(it builds a ``Stream`` object for the current stream) against about 1 through ``cuEventRecord``. Both
calls go to the current stream, as torch's would. Only for graphs that draw no numbers from torch's
generators: their ``replay()`` also advances the generator's offset. A call the driver refuses (no
``libcuda``, no current context on this thread, a sticky error) falls back to torch's own call, which sets
the context up or raises torch's error; after ``MAX_REFUSALS`` refusals the driver is not tried again.

:meth:`DriverCalls.fuse` makes two kept graphs (``CUDAGraph(keep_graph=True)``) one executable graph,
each cloned as a child node: the input copy's graph and a key's, launched together by
:meth:`DriverCalls.launch_exec` (no torch fallback: where the driver refuses, the caller launches the two
apart).
"""

from __future__ import annotations

import ctypes

import torch

MAX_REFUSALS = 8
_libcuda: ctypes.CDLL | None | bool = None  # None: not loaded yet; False: not available


def _load() -> ctypes.CDLL | None:
    global _libcuda
    if _libcuda is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            p, vp = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
            for name, args in (
                ("cuGraphLaunch", (p, p)),
                ("cuEventRecord", (p, p)),
                ("cuGraphCreate", (vp, ctypes.c_uint)),
                ("cuGraphAddChildGraphNode", (vp, p, vp, ctypes.c_size_t, p)),
                ("cuGraphInstantiateWithFlags", (vp, p, ctypes.c_ulonglong)),
                ("cuGraphDestroy", (p,)),
                ("cuGraphExecDestroy", (p,)),
                ("cuMemcpyHtoDAsync_v2", (ctypes.c_uint64, p, ctypes.c_size_t, p)),
            ):
                getattr(lib, name).argtypes = args
                getattr(lib, name).restype = ctypes.c_int
            _libcuda = lib
        except (OSError, AttributeError):
            _libcuda = False
    return _libcuda or None


class DriverCalls:
    """``launch(graph)`` and ``record(event)`` on ``device``'s current stream, through the driver where it
    takes them. ``graph``: a captured :class:`torch.cuda.CUDAGraph`; ``event``: a :class:`torch.cuda.Event`
    (its first record is torch's, which creates it). Also two kept graphs made one executable graph
    (:meth:`fuse`), launched by :meth:`launch_exec`."""

    def __init__(self, device: torch.device) -> None:
        cuda = device.type == "cuda"
        self._index = device.index if device.index is not None or not cuda else torch.cuda.current_device()
        lib = _load() if cuda else None
        stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self._on = lib is not None and stream is not None and hasattr(torch.cuda.CUDAGraph, "raw_cuda_graph_exec")
        self._lib, self._stream = lib, stream
        self.refusals = 0

    def launch(self, graph: torch.cuda.CUDAGraph, handle: int | None = None) -> None:
        """``handle``: ``graph.raw_cuda_graph_exec()`` kept by the caller (a call less per launch)."""
        if not (self._on and self.launch_exec(handle or graph.raw_cuda_graph_exec())):
            graph.replay()

    def launch_exec(self, handle: int) -> bool:
        """Launch an executable graph (one made by :meth:`fuse`, or a captured graph's); ``False`` (nothing
        launched) where refused."""
        if self._on:
            if self._lib.cuGraphLaunch(handle, self._stream(self._index)) == 0:
                return True
            self._refused()
        return False

    def fuse(self, first: int, then: int) -> int | None:
        """An executable graph of two ``cudaGraph_t`` (each cloned as a child node): ``first``, then
        ``then``; its handle, or ``None`` where the driver refuses. Free it with :meth:`destroy_exec`."""
        if not self._on:
            return None
        lib, graph, exec_ = self._lib, ctypes.c_void_p(), ctypes.c_void_p()
        if lib.cuGraphCreate(ctypes.byref(graph), 0) != 0:
            return None
        try:
            a, b = ctypes.c_void_p(), ctypes.c_void_p()
            ok = (
                lib.cuGraphAddChildGraphNode(ctypes.byref(a), graph, None, 0, first) == 0
                and lib.cuGraphAddChildGraphNode(ctypes.byref(b), graph, ctypes.byref(a), 1, then) == 0
                and lib.cuGraphInstantiateWithFlags(ctypes.byref(exec_), graph, 0) == 0
            )
        finally:
            lib.cuGraphDestroy(graph)  # the executable graph is independent of it
        return exec_.value if ok and exec_.value else None

    def destroy_exec(self, handle: int) -> None:
        if self._lib is not None:
            self._lib.cuGraphExecDestroy(handle)

    def upload(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """``dst.copy_(src, non_blocking=True)`` for a contiguous pinned ``src`` and a contiguous CUDA
        ``dst`` of the same bytes, in stream order (``src`` must stay as it is until the copy has run)."""
        if self._on:
            nbytes = src.numel() * src.element_size()
            if self._lib.cuMemcpyHtoDAsync_v2(dst.data_ptr(), src.data_ptr(), nbytes, self._stream(self._index)) == 0:
                return
            self._refused()
        dst.copy_(src, non_blocking=True)

    def record(self, event: torch.cuda.Event) -> None:
        handle = event.cuda_event  # 0 until torch's first record creates the event
        if self._on and handle:
            if self._lib.cuEventRecord(handle, self._stream(self._index)) == 0:
                return
            self._refused()
        event.record()

    def _refused(self) -> None:
        self.refusals += 1
        self._on = self.refusals < MAX_REFUSALS
