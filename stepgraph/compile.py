"""Model forwards compiled by torch.compile, run inside stepgraph's one step graph.

``torch.compile(mode="reduce-overhead")`` gives fused kernels but wraps each compiled region in CUDA graphs
of its own, with guards and copies around them. Here the forwards are compiled with inductor's kernels and
no CUDA graphs (the default mode); stepgraph then captures those kernels, with the rest of the step, into
the key's one graph. A :class:`CompiledForward` keeps that safe:

* **Compiles happen in warm-up.** A call whose input signature (shapes, dtypes, devices) is new compiles;
  the runner's eager warm-up runs each key before capturing it, so the capture meets only compiled
  signatures. Inside a capture the forward runs under ``torch.compiler.set_stance("fail_on_recompile")``:
  a compile there (which would sync the device) fails the capture, and the key runs eagerly.
* **One compiled variant for every key.** The batch dimension (dim 0 of every tensor argument) and the
  token dimension (dim 1 of the Target and Draft signatures) are dynamic, sizes of one included (torch
  would otherwise specialise them): every batch size and draft length share one variant; other
  dimensions stay static. A forward whose code branches on such a size (SDPA picks its kernel by whether
  a size is 1: keep it in a custom op, as the example model does) compiles again, and that compile is
  counted. Warm-up of many keys compiles once per forward.
* **A compile that fails is not fatal.** It is logged once and counted, and that signature runs the
  forward as written: a key never holds a half-compiled graph.
* **Compile time is counted apart from capture time.** Per forward (:meth:`CompiledForward.info`) and
  process-wide (:func:`seconds_compiling`), which the key table reads around each key's warm-up.

Bit-exactness holds within one setting: compiled kernels round differently from eager ones, so a compiled
step graph equals the compiled eager step, not the uncompiled one.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import torch

log = logging.getLogger("stepgraph")

#: torch.compile backends: ``True`` means inductor; a name picks another (``"aot_eager"`` to tell a
#: compiler bug from a model bug).
DEFAULT_BACKEND = "inductor"

_seconds_compiling = 0.0


def seconds_compiling() -> float:
    """Seconds spent in calls that compiled, over every :class:`CompiledForward` of this process."""
    return _seconds_compiling


def backend_name(compile: bool | str) -> str | None:
    """The torch.compile backend a ``compile=`` argument asks for (``None``: no compile).

    Raises ValueError for anything but a bool or a non-empty backend name."""
    if compile is True:
        return DEFAULT_BACKEND
    if compile is False or compile is None:
        return None
    if isinstance(compile, str) and compile:
        return compile
    raise ValueError(f"compile must be True, False or a torch.compile backend name such as 'inductor', got {compile!r}")


def _signature(args: tuple) -> tuple:
    """A call this forward has seen before needs no compile: per tensor, whether its batch (dim 0) and token
    (dim 1) sizes are 1, its shape past them, dtype and device; other arguments by value."""
    return tuple(
        (tuple(a.shape[2:]), tuple(n == 1 for n in a.shape[:2]), a.dim(), a.dtype, a.device)
        if isinstance(a, torch.Tensor)
        else a
        for a in args
    )


class CompiledForward:
    """``forward(*tensors)`` compiled with ``torch.compile(backend)``, no CUDA graphs of its own.

    Parameters
    ----------
    forward:
        A graph-safe model forward whose tensor arguments all lead with the batch dimension (the
        :class:`~stepgraph.speculative.step.Target` and :class:`~stepgraph.speculative.step.Draft` signatures).
    name:
        For logs and :meth:`info` (``"target"``, ``"draft"``).
    backend:
        A torch.compile backend name (``"inductor"``).
    """

    def __init__(self, forward: Callable, *, name: str, backend: str = DEFAULT_BACKEND) -> None:
        if not hasattr(torch.compiler, "set_stance"):
            raise RuntimeError(f"compile=True needs torch >= 2.6, this is {torch.__version__}: upgrade or leave it off")
        self.forward, self.name, self.backend = forward, name, backend
        options = {"triton.cudagraphs": False} if backend == "inductor" else None
        self._compiled = torch.compile(forward, backend=backend, options=options, dynamic=None)
        self._ready: set[tuple] = set()
        self._failed: set[tuple] = set()
        self.compiles = 0
        self.failures = 0
        self.seconds = 0.0
        self.error: str | None = None

    def __getattr__(self, name: str) -> Any:  # model facts (hidden_size, ...) pass through
        if name == "forward":
            raise AttributeError(name)
        return getattr(self.forward, name)

    def __call__(self, *args):
        sig = _signature(args)
        if sig in self._ready:
            if _capturing():
                with torch.compiler.set_stance("fail_on_recompile"):
                    return self._compiled(*args)
            return self._compiled(*args)
        if sig in self._failed:
            return self.forward(*args)
        if _capturing():
            raise RuntimeError(
                f"{self.name}: torch.compile would compile a new input signature inside a CUDA graph capture; "
                "run the key eagerly first (the runner's warm-up does)"
            )
        return self._compile(sig, args)

    def _compile(self, sig: tuple, args: tuple):
        for a in args:
            if isinstance(a, torch.Tensor):
                for dim in range(min(a.dim(), 2)):  # the batch, and the tokens of a [B, T, ...] argument
                    torch._dynamo.maybe_mark_dynamic(a, dim)
        t0, graphs = time.perf_counter(), _graphs_compiled()
        try:
            with _compile_settings():
                out = self._compiled(*args)
        except Exception as e:  # noqa: BLE001 - the forward as written still works; say why once
            self._spent(t0)
            self.failures += 1
            self._failed.add(sig)
            if self.error is None:
                self.error = f"{type(e).__name__}: {e}"[:500]
                log.warning("%s: torch.compile failed, running it uncompiled: %s", self.name, self.error)
            return self.forward(*args)
        self._ready.add(sig)
        if graphs is not None and _graphs_compiled() == graphs:  # a variant compiled before serves it
            return out
        spent = self._spent(t0)
        self.compiles += 1
        log.info("%s: compiled for %s in %.1f s (%s)", self.name, _describe(args), spent, self.backend)
        return out

    def _spent(self, t0: float) -> float:
        """Add the seconds since ``t0`` to this forward's and the process's compile time; return them."""
        global _seconds_compiling
        spent = time.perf_counter() - t0
        self.seconds += spent
        _seconds_compiling += spent
        return spent

    def info(self) -> dict:
        """``backend``, ``compiles`` (signatures compiled), ``failures`` (signatures running uncompiled),
        ``seconds`` (spent in calls that compiled) and the first ``error``."""
        return {
            "backend": self.backend,
            "compiles": self.compiles,
            "failures": self.failures,
            "seconds": round(self.seconds, 3),
            "error": self.error,
        }


def _graphs_compiled() -> int | None:
    """Graphs torch.compile has compiled in this process; ``None`` where torch does not count them (then
    every new signature counts as a compile)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return None
    return counters["stats"]["unique_graphs"]


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


@contextlib.contextmanager
def _compile_settings():
    """While compiling: the batch and token dimensions are the only dynamic ones (no automatic dynamic
    shapes), sizes of one among them not specialised; room for a variant per call site and key; and the
    sync check off (compiling may read the device; with the default two warm-up runs per key, the
    runner's last one runs the compiled key under the check)."""
    sync_mode = torch.cuda.get_sync_debug_mode() if torch.cuda.is_available() else 0
    if sync_mode:
        torch.cuda.set_sync_debug_mode(0)
    shapes = torch.fx.experimental._config
    oblivious = {"backed_size_oblivious": True} if hasattr(shapes, "backed_size_oblivious") else {}
    try:
        limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
        with torch._dynamo.config.patch(automatic_dynamic_shapes=False, **{limit: 64}), shapes.patch(**oblivious):
            yield
    finally:
        if sync_mode:
            torch.cuda.set_sync_debug_mode(sync_mode)


def _describe(args: tuple) -> str:
    return ", ".join(str(list(a.shape)) for a in args if isinstance(a, torch.Tensor))
