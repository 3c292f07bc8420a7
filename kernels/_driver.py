"""Graph launches and event records through the CUDA driver, for host paths that run on every call.

Torch's Python wrappers cost more host time than the work: on the H200 host (run 21) a small graph's
``CUDAGraph.replay()`` took 3.0 µs against 2.2 through ``cuGraphLaunch``, and ``Event.record()`` 5.8 µs
(it builds a ``Stream`` object for the current stream) against about 1 through ``cuEventRecord``. Both
calls go to the current stream, as torch's would. Only for graphs that draw no numbers from torch's
generators: their ``replay()`` also advances the generator's offset. A call the driver refuses (no
``libcuda``, no current context on this thread, a sticky error) falls back to torch's own call, which sets
the context up or raises torch's error; after ``MAX_REFUSALS`` refusals the driver is not tried again.
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
            for name in ("cuGraphLaunch", "cuEventRecord"):
                getattr(lib, name).argtypes = (ctypes.c_void_p, ctypes.c_void_p)
                getattr(lib, name).restype = ctypes.c_int
            _libcuda = lib
        except (OSError, AttributeError):
            _libcuda = False
    return _libcuda or None


class DriverCalls:
    """``launch(graph)`` and ``record(event)`` on ``device``'s current stream, through the driver where it
    takes them. ``graph``: a captured :class:`torch.cuda.CUDAGraph`; ``event``: a :class:`torch.cuda.Event`
    (its first record is torch's, which creates it)."""

    def __init__(self, device: torch.device) -> None:
        cuda = device.type == "cuda"
        self._index = device.index if device.index is not None or not cuda else torch.cuda.current_device()
        lib = _load() if cuda else None
        stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self._on = lib is not None and stream is not None and hasattr(torch.cuda.CUDAGraph, "raw_cuda_graph_exec")
        self._lib, self._stream = lib, stream
        self.refusals = 0

    def launch(self, graph: torch.cuda.CUDAGraph) -> None:
        if self._on:
            if self._lib.cuGraphLaunch(graph.raw_cuda_graph_exec(), self._stream(self._index)) == 0:
                return
            self._refused()
        graph.replay()

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
