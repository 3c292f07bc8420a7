"""StepGraphRunner: one CUDA graph per key (padded batch size x sampling class) for a user's step.

``run(inputs, sampling)`` pads the batch to its bucket, copies the inputs into static buffers, and
replays the key's graph, or runs the same step eagerly **at the same padded shape** when the key has no
graph (refused for memory, failed capture, oversize batch, no CUDA). Keys are captured by
:meth:`capture` / :meth:`warmup` ahead of serving, or on first use, always on pad-filled buffers (never
on the live batch, whose state a warm-up would advance).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import torch

from stepgraph.buffers import KEEP, Buffer, StaticBuffers
from stepgraph.capture import Captured, CudaGraphBackend, capture_progress, frozen_gc, graphs_unavailable_reason
from stepgraph.config import RunnerConfig
from stepgraph.errors import CaptureError, RecaptureRefused, classify_capture_exception
from stepgraph.keys import Buckets, GraphKey, Sampling
from stepgraph.memory import MemoryGuard, NoReader, ReleaseBudget
from stepgraph.outputs import StepOutputs

log = logging.getLogger("stepgraph")

StepFn = Callable[[Mapping[str, torch.Tensor], int, Sampling], Mapping[str, torch.Tensor]]

_FAIL, _REFUSE, _CAPTURE = 0, 1, 2  # capture votes; ranks take the lowest (see ``agree``)


@dataclass
class KeyStats:
    """Bookkeeping of one key (reported by :meth:`StepGraphRunner.info`)."""

    key: GraphKey
    status: str = "uncaptured"  # uncaptured | captured | refused | failed
    captured: Captured | None = None
    pool_bytes: int = 0
    warmup_peak_bytes: int = 0
    capture_seconds: float = 0.0
    replays: int = 0
    eager_runs: int = 0
    padded_rows: int = 0
    runs_since_refusal: int = 0
    refusals: int = 0
    failures: int = 0
    error: str | None = None
    cause: str | None = None

    def as_dict(self) -> dict:
        return {
            "status": self.status,
            "children": [c.info() for c in self.captured.children] if self.captured is not None else [],
            "pool_bytes": self.pool_bytes,
            "warmup_peak_bytes": self.warmup_peak_bytes,
            "capture_ms": round(self.capture_seconds * 1e3, 3),
            "replays": self.replays,
            "eager_runs": self.eager_runs,
            "padded_rows": self.padded_rows,
            "refusals": self.refusals,
            "failures": self.failures,
            "error": self.error,
            "cause": self.cause,
        }


@dataclass
class WarmupReport:
    batch_sizes: list[int]
    captured_keys: list[str]
    missing: list[int]
    seconds: float

    def as_dict(self) -> dict:
        return {
            "batch_sizes": self.batch_sizes,
            "captured_keys": self.captured_keys,
            "missing": self.missing,
            "seconds": round(self.seconds, 4),
        }


@dataclass
class _Counters:
    runs: int = 0
    oversize_runs: int = 0
    capture_failures: int = 0
    histogram: Counter = field(default_factory=Counter)


def _serialised(method):
    """Run ``method`` under the runner's lock (see :meth:`StepGraphRunner.run`, "Threads")."""

    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


class StepGraphRunner:
    """Capture and replay a step function per key, with memory checks and eager fallback.

    Parameters
    ----------
    step:
        ``step(buffers, batch_size, sampling) -> {name: tensor}``. ``buffers`` maps each declared name to
        its ``[:batch_size]`` view (``batch_size`` is the padded size). Outputs must have the batch first.
        Graph-safe code only: no ``.item()``, ``.tolist()``, ``nonzero`` or Python branches on tensor values.
    buffers:
        ``{name: Buffer(...)}`` declarations (or a built :class:`StaticBuffers`). The leading dimension
        is the largest batch.
    device:
        Where the buffers live (default: CUDA if available, else CPU).
    config:
        :class:`RunnerConfig`; toggles default to the environment.
    backend:
        Graph backend (default: CUDA graphs when available). Tests inject a simulated one.
    guard:
        Memory guard (default: torch readings, ``config.memory_margin_bytes``, the process release budget).
    agree:
        ``agree(vote: int) -> int`` returns the lowest vote over all ranks, so that every rank takes the
        same decision (tensor parallelism: a graph launch is collective). Votes: 2 capture, 1 refused for
        memory, 0 failed. The runner votes twice per key: after warm-up and the memory check, and after
        its capture (a capture that failed on one rank is discarded on all).
    parked:
        ``parked()`` returns a context manager that parks state outside the buffers (e.g. a relay slot
        the step reads through views) at no-op values while a key is warmed up and captured.
    before_capture:
        ``before_capture(key)`` runs after the memory check and before the key's capture (e.g. capturing
        per-stage graphs that the step then splices, :mod:`stepgraph.splice`).
    """

    def __init__(
        self,
        step: StepFn,
        buffers: Mapping[str, Buffer] | StaticBuffers,
        *,
        device: torch.device | str | None = None,
        config: RunnerConfig | None = None,
        backend=None,
        guard: MemoryGuard | None = None,
        agree: Callable[[int], int] | None = None,
        parked: Callable[[], contextlib.AbstractContextManager] | None = None,
        before_capture: Callable[[GraphKey], None] | None = None,
        name: str = "step",
    ) -> None:
        self.config = config or RunnerConfig()
        self.toggles = self.config.toggles
        if isinstance(buffers, StaticBuffers):
            self.buffers = buffers
        else:
            dev = (
                torch.device(device)
                if device is not None
                else torch.device("cuda" if torch.cuda.is_available() else "cpu")
            )
            self.buffers = StaticBuffers(buffers, dev, one_launch_copy=self.toggles.one_launch_copy)
        self.device = self.buffers.device
        self.step = step
        self.name = name
        sizes = [b for b in self.config.buckets if b <= self.buffers.max_batch]
        if not sizes:
            raise ValueError(
                f"no bucket fits the buffers' batch size {self.buffers.max_batch}; buckets: {self.config.buckets}"
            )
        self.buckets = Buckets(sizes)
        self.agree = agree
        self.parked = parked or contextlib.nullcontext
        self.before_capture = before_capture
        self._keys: dict[GraphKey, KeyStats] = {}
        self._counters = _Counters()
        self._generation = 0
        self._poison: list[torch.Tensor] = []
        self._views_cache: dict[tuple[GraphKey, int], dict[str, torch.Tensor]] = {}
        self._replay_cache: dict[tuple[int, Sampling], tuple] = {}  # (batch, sampling) -> replay fast path
        self._captured_list: list[Captured] = []
        self.last_warmup: WarmupReport | None = None
        self._lock = threading.RLock()  # run / capture / warm-up / release, one thread at a time

        reason = graphs_unavailable_reason(self.device)
        if reason is None and not self.toggles.step_graph:
            reason = "the step graph is switched off (STEPGRAPH_ENABLE=0 or Toggles(step_graph=False)); it runs eagerly"
        if backend is not None:
            reason = None
        self.unavailable_reason = reason
        self.backend = backend
        if self.backend is None and reason is None:
            self.backend = CudaGraphBackend(self.device, capture_error_mode=self.config.capture_error_mode)
        if guard is not None:
            self.guard = guard
        elif self.backend is not None:
            self.guard = MemoryGuard(self.backend.reader, self.config.memory_margin_bytes, rank=_rank())
        else:
            self.guard = MemoryGuard(NoReader(), self.config.memory_margin_bytes, budget=ReleaseBudget(0), rank=_rank())

    # ------------------------------------------------------------------------------------------------
    @property
    def graphs_available(self) -> bool:
        return self.backend is not None

    def key_for(self, batch_size: int, sampling: Sampling | str | int = Sampling.GREEDY) -> GraphKey | None:
        """The key a batch of ``batch_size`` runs under, or ``None`` when it exceeds the largest bucket."""
        padded = self.buckets.pad(batch_size)
        return None if padded is None else GraphKey(padded, Sampling.parse(sampling))

    def stats(self, key: GraphKey) -> KeyStats:
        s = self._keys.get(key)
        if s is None:
            s = self._keys[key] = KeyStats(key)
        return s

    # ------------------------------------------------------------------------------------------------
    def run(
        self,
        inputs: Mapping[str, torch.Tensor] | None = None,
        sampling: Sampling | str | int = Sampling.GREEDY,
        *,
        batch_size: int | None = None,
        copy_outputs: bool = False,
    ) -> StepOutputs:
        """Run one step for a batch.

        Parameters
        ----------
        inputs:
            ``{name: tensor}`` with the batch first, ``(B, *row)``, matching the declared dtype; on the
            buffers' device or on the host (staged through one pinned copy). Buffers not named keep
            their content (state the step carries between runs).
        sampling:
            The batch's sampling class (the most general one present).
        batch_size:
            Required when ``inputs`` is empty (the inputs are already in the buffers).
        copy_outputs:
            Return copies instead of views that the next run overwrites.

        Returns
        -------
        StepOutputs
            The step's outputs for the first ``B`` rows. Valid until the next :meth:`run`.

        Raises
        ------
        ValueError / TypeError
            For an empty batch, or inputs of the wrong name, shape, dtype or device.

        Threads: calls are serialised by a lock (copy-in, replay and hand-out of one call never interleave
        with another's). Outputs are views of memory that every run rewrites, so a thread sharing the
        runner should pass ``copy_outputs=True`` (copied under the lock); reading views after another
        run raises :class:`~stepgraph.errors.StaleOutputError`.
        """
        if type(sampling) is not Sampling:
            sampling = Sampling.parse(sampling)
        with self._lock:
            if not inputs and not copy_outputs:  # steady state: inputs already in place, key captured
                fast = self._replay_cache.get((batch_size, sampling))
                if fast is not None:
                    return self._replay_fast(*fast)
            return self._run(inputs, sampling, batch_size, copy_outputs)

    def _run(
        self, inputs: Mapping[str, torch.Tensor] | None, sampling: Sampling, batch_size: int | None, copy_outputs: bool
    ) -> StepOutputs:
        inputs = inputs or {}
        real = self.buffers.check_inputs(inputs) if inputs else None
        if batch_size is not None:
            if batch_size < 1:
                raise ValueError(f"empty batch: batch_size must be >= 1, got {batch_size}")
            if real is not None and real != batch_size:
                raise ValueError(f"batch_size={batch_size} but the inputs have {real} rows")
            if batch_size > self.buffers.max_batch:
                raise ValueError(f"batch of {batch_size} exceeds the buffers' batch size {self.buffers.max_batch}")
            real = batch_size
        if real is None:
            raise ValueError("run() needs inputs or batch_size (inputs already in the buffers)")

        self._generation += 1
        self._poison_handed_out()
        padded = self.buckets.pad(real)
        c = self._counters
        c.runs += 1
        c.histogram[real] += 1
        if padded is None:  # larger than the largest bucket: eager at its own size, counted
            c.oversize_runs += 1
            self.buffers.copy_in(inputs, real, real)
            outputs = self._call_step(real, sampling)
            return self._hand_out(outputs, real, copy_outputs)

        key = GraphKey(padded, sampling)
        stats = self.stats(key)
        if self._should_capture(stats):
            self._capture_key(key)
        self.buffers.copy_in(inputs, real, padded)
        stats.padded_rows += padded - real
        if stats.captured is not None:
            stats.captured.replay()
            stats.replays += 1
            views = self._views_cache.get((key, real))
            if views is None:
                views = {k: v[:real] for k, v in stats.captured.outputs.items()}
                self._views_cache[(key, real)] = views
                if not self.toggles.debug:
                    self._replay_cache[(real, sampling)] = (stats, stats.captured.replay, views, real)
            return self._hand_out(views, real, copy_outputs, sliced=True)
        stats.eager_runs += 1
        if stats.status == "refused":
            stats.runs_since_refusal += 1
        outputs = self._call_step(padded, sampling)
        return self._hand_out(outputs, real, copy_outputs)

    def _replay_fast(self, stats: KeyStats, replay, views: dict, real: int) -> StepOutputs:
        """The hot path: same bookkeeping as :meth:`run` for a captured key, none of the checks it needs."""
        self._generation += 1
        c = self._counters
        c.runs += 1
        c.histogram[real] += 1
        stats.padded_rows += stats.key.batch_size - real
        replay()
        stats.replays += 1
        return StepOutputs(views, self, self._generation)

    def _should_capture(self, stats: KeyStats) -> bool:
        if self.backend is None or stats.captured is not None or not self.config.capture_on_first_use:
            return False
        if stats.status == "uncaptured":
            return True
        return stats.status == "refused" and stats.runs_since_refusal >= self.config.refused_retry_runs

    def _call_step(self, batch: int, sampling: Sampling) -> dict[str, torch.Tensor]:
        out = self.step(self.buffers.views(batch), batch, sampling)
        if not isinstance(out, Mapping):
            raise TypeError(f"the step function must return a mapping of name -> tensor, got {type(out).__name__}")
        for name, t in out.items():
            if not isinstance(t, torch.Tensor) or t.dim() == 0 or t.shape[0] != batch:
                shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"step output {name!r} has shape {shape}; outputs must have the batch ({batch}) first")
        return dict(out)

    def _hand_out(self, outputs: dict[str, torch.Tensor], real: int, copy: bool, sliced: bool = False) -> StepOutputs:
        tensors = outputs if sliced else {k: v[:real] for k, v in outputs.items()}
        if copy:
            return StepOutputs({k: v.clone() for k, v in tensors.items()}, None, self._generation)
        if self.toggles.debug:
            tensors = {k: v.clone() for k, v in tensors.items()}
            self._poison.extend(tensors.values())
        return StepOutputs(tensors, self, self._generation)

    def _poison_handed_out(self) -> None:
        for t in self._poison:
            if t.dtype.is_floating_point or t.dtype.is_complex:
                t.fill_(float("nan"))
            elif t.dtype == torch.bool:
                t.fill_(True)
            else:
                t.fill_(-1 if t.dtype.is_signed else torch.iinfo(t.dtype).max)
        self._poison.clear()

    # ------------------------------------------------------------------------------------------------
    @_serialised
    def capture(self, keys: Iterable[GraphKey | tuple[int, Sampling | str]] | None = None) -> list[GraphKey]:
        """Capture ``keys`` (default: every bucket with the default sampling), largest first.

        Keys already captured are skipped. Returns the keys that have a graph afterwards. A key that is
        refused or fails runs eagerly (``on_capture_error="raise"`` raises :class:`CaptureError`).
        """
        if self.backend is None:
            log.info("%s: no graphs to capture: %s", self.name, self.unavailable_reason)
            return []
        if keys is None:
            keys = [GraphKey(b, self.config.default_sampling) for b in self.buckets]
        todo = sorted({self._as_key(k) for k in keys}, key=lambda k: (-k.batch_size, -int(k.sampling)))
        todo = [k for k in todo if self.stats(k).captured is None]
        with frozen_gc(), capture_progress(self.config.progress and len(todo) > 1, len(todo), self.name) as advance:
            for key in todo:
                self._capture_key(key)
                advance(str(key))
        return [k for k, s in self._keys.items() if s.captured is not None]

    def _as_key(self, k) -> GraphKey:
        if isinstance(k, GraphKey):
            key = k
        else:
            bs, sampling = k
            key = GraphKey(int(bs), Sampling.parse(sampling))
        if key.batch_size not in self.buckets.sizes:
            raise ValueError(f"{key}: batch size {key.batch_size} is not a bucket; buckets are {list(self.buckets)}")
        return key

    def _capture_key(self, key: GraphKey) -> None:
        stats = self.stats(key)
        bs = key.batch_size
        saved = {n: t[:bs].clone() for n, t in self.buffers.tensors.items() if self.buffers.specs[n].pad is not KEEP}
        self.buffers.pad_rows(list(saved), 0, bs)
        with frozen_gc(), self.parked():
            self._warm_check_capture(key, stats, saved)

    def _warm_check_capture(self, key: GraphKey, stats: KeyStats, saved: dict[str, torch.Tensor]) -> None:
        bs = key.batch_size
        captured, failure = None, None
        try:
            try:
                peak = self.backend.warmup(lambda: self._call_step(bs, key.sampling), self.config.warmup_iters)
                stats.warmup_peak_bytes = peak
                needed = stats.pool_bytes if stats.pool_bytes else peak
                vote = _CAPTURE if self.guard.check(str(key), needed).allowed else _REFUSE
            except Exception as e:  # noqa: BLE001 - reported, key falls back to eager
                failure, vote = _failure_of(e), _FAIL
            vote = self._vote(vote)
            if vote == _CAPTURE:
                try:
                    if self.before_capture is not None:
                        self.before_capture(key)
                    captured = self.backend.capture(lambda: self._call_step(bs, key.sampling))
                except Exception as e:  # noqa: BLE001
                    failure = _failure_of(e)
                if self._vote(_CAPTURE if captured is not None else _FAIL) != _CAPTURE:
                    if captured is not None:  # every rank replays a key or none does: a graph launch is collective
                        self.backend.discard(captured)
                        captured = None
                    vote = _FAIL
        finally:
            for n, t in saved.items():
                self.buffers.tensors[n][:bs].copy_(t)
        if vote == _REFUSE:
            stats.status, stats.runs_since_refusal = "refused", 0
            stats.refusals += 1
            return
        if vote == _FAIL:
            peer = ("peer_failed", "another rank failed to capture this key; every rank runs it eagerly")
            cause, text = failure or peer
            self._record_failure(stats, cause, text)
            if self.config.on_capture_error == "raise":
                raise CaptureError(f"capturing {key} failed: {text}", key=key, cause=cause) from None
            return
        stats.captured, stats.status, stats.error, stats.cause = captured, "captured", None, None
        stats.pool_bytes = captured.pool_bytes + sum(c.pool_bytes for c in captured.children)
        stats.capture_seconds = captured.seconds + sum(c.seconds for c in captured.children)
        self._captured_list.append(captured)
        log.info(
            "%s: captured key %s in %.1f ms, pool +%.1f MiB (warm-up peak %.1f MiB)",
            self.name,
            key,
            captured.seconds * 1e3,
            captured.pool_bytes / 2**20,
            stats.warmup_peak_bytes / 2**20,
        )

    def _vote(self, vote: int) -> int:
        """This rank's vote, or the lowest vote over all ranks when ``agree`` is set."""
        return vote if self.agree is None else int(self.agree(vote))

    def _record_failure(self, stats: KeyStats, cause: str, text: str) -> None:
        stats.status, stats.cause, stats.error = "failed", cause, text
        stats.failures += 1
        self._counters.capture_failures += 1
        if stats.failures == 1:
            log.warning("%s: capture of key %s failed (%s): %s", self.name, stats.key, cause, text)

    # ------------------------------------------------------------------------------------------------
    @_serialised
    def warmup(
        self,
        max_running_requests: int | None = None,
        sampling: Sampling | str | int | None = None,
        make_inputs: Callable[[int], Mapping[str, torch.Tensor]] | None = None,
    ) -> WarmupReport:
        """Capture the keys serving will meet first, then run one batch of each size 1..N through them.

        ``N = min(config.max_warmup_batch, largest bucket, max_running_requests)``. ``make_inputs(k)`` gives
        inputs for a batch of ``k`` (default: the buffers' pad values, which must make a row a no-op).
        A size whose key is still missing gets one more batch, then a warning. Logs the captured keys
        and the total time.
        """
        t0 = time.perf_counter()
        sampling = self.config.default_sampling if sampling is None else Sampling.parse(sampling)
        n = min(self.config.max_warmup_batch, self.buckets.largest, max_running_requests or math.inf)
        sizes = list(range(1, int(n) + 1))
        self.capture([self.key_for(k, sampling) for k in sizes])

        def batch(k: int) -> None:
            if make_inputs is None:
                self.buffers.pad_rows(list(self.buffers.specs), 0, self.buckets.pad(k))
                self.run(None, sampling, batch_size=k)
            else:
                self.run(make_inputs(k), sampling)

        for k in sizes:
            batch(k)
        missing = []
        if self.backend is not None:
            for k in sizes:
                key = self.key_for(k, sampling)
                if self.stats(key).captured is None:
                    self._capture_key(key)
                    batch(k)
                    if self.stats(key).captured is None:
                        missing.append(k)
                        log.warning(
                            "%s: warm-up: batch size %d still has no graph (key %s: %s)",
                            self.name,
                            k,
                            key,
                            self.stats(key).status,
                        )
        seconds = time.perf_counter() - t0
        captured = sorted(
            {str(self.key_for(k, sampling)) for k in sizes if self.stats(self.key_for(k, sampling)).captured}
        )
        self.last_warmup = WarmupReport(sizes, captured, missing, seconds)
        log.info(
            "%s: warm-up of batch sizes 1..%d took %.1f ms; captured keys: %s",
            self.name,
            len(sizes),
            seconds * 1e3,
            ", ".join(captured) or "none",
        )
        return self.last_warmup

    # ------------------------------------------------------------------------------------------------
    @_serialised
    def request_recapture(self, reason: str = "weight update") -> None:
        """Ask for the graphs to be captured again (e.g. after weights moved to new tensors).

        Raises
        ------
        RecaptureRefused
            While graphs are live: replaying them after a recapture request would read stale addresses.
            Call :meth:`release` first; the next :meth:`capture`, :meth:`warmup` or run captures again.
        """
        live = [str(k) for k, s in self._keys.items() if s.captured is not None]
        if live:
            raise RecaptureRefused(
                f"recapture ({reason}) refused while the step graph is on "
                f"({len(live)} live graphs: {', '.join(live[:4])}"
                f"{'...' if len(live) > 4 else ''}); call runner.release() first, then capture again"
            )
        for s in self._keys.values():
            if s.status in ("refused", "failed"):
                s.status = "uncaptured"

    @_serialised
    def release(self) -> None:
        """Tear down every graph and the shared pool; keys can be captured again afterwards.

        ``torch.cuda.memory_reserved()`` returns to its level before the captures. cuBLAS keeps the
        workspace it made for the capture stream (32 MiB by default, ``CUBLAS_WORKSPACE_CONFIG``); when no
        graph is live anywhere in the process, ``torch._C._cuda_clearCublasWorkspaces()`` frees it too.
        """
        if self.backend is not None:
            self.backend.release(self._captured_list)
        for s in self._keys.values():
            s.captured = None
            s.status = "uncaptured"
        self._views_cache.clear()
        self._replay_cache.clear()
        self._generation += 1

    # ------------------------------------------------------------------------------------------------
    def info(self) -> dict:
        """Counters and per-key figures (see the README's "Info fields")."""
        from stepgraph.report import build_info

        return build_info(self)

    def print_report(self, console=None) -> None:
        from stepgraph.report import print_report

        print_report(self.info(), console=console)


def _failure_of(e: Exception) -> tuple[str, str]:
    """``(cause, message)`` of a failed warm-up or capture; the exception itself is not kept (it would hold
    the step's tensors through its traceback)."""
    if isinstance(e, CaptureError):
        return e.cause, str(e)
    cause, hint = classify_capture_exception(e)
    return cause, f"{hint}. Cause: {type(e).__name__}: {e}"


def _rank() -> int:
    try:
        import torch.distributed as dist

        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    except Exception:  # noqa: BLE001
        return 0
