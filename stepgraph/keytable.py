"""The key table: each key's lifecycle, apart from replay.

For one key: park outside state and pad the buffers, warm up on the capture stream, check memory, vote
with the other ranks, capture (with the key's splice children) and instantiate (with the launch fused with
the input copy), vote again, restore the buffers, and record the outcome (captured, refused for memory,
failed with its cause). Also: each key's host-side ``before_replay`` hook (made once per key, kept with
its stats), recapture requests and release.
:class:`~stepgraph.runner.StepGraphRunner` owns one and asks it before each run whether a key should be
captured now.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch

from stepgraph.buffers import KEEP, StaticBuffers
from stepgraph.capture import Captured, Child, GraphBackend
from stepgraph.compile import seconds_compiling
from stepgraph.config import RunnerConfig
from stepgraph.errors import CaptureError, RecaptureRefused, classify_capture_exception
from stepgraph.graphs import frozen_gc
from stepgraph.keys import GraphKey
from stepgraph.memory import MemoryGuard

log = logging.getLogger("stepgraph")

CallStep = Callable[[GraphKey], dict[str, torch.Tensor]]  #: the step at a key's (padded) shape
#: A key's host-side hook: ``hook(batch_size)`` before each replay or eager run, and before its capture.
ReplayHook = Callable[[int], None]
#: ``before_replay(key) -> hook``: makes a key's hook (its per-key state) the first time the key is met.
BeforeReplay = Callable[[GraphKey], ReplayHook | None]


class KeyStatus(str, enum.Enum):
    """Where a key stands (compares equal to its lower-case name)."""

    UNCAPTURED = "uncaptured"
    CAPTURED = "captured"
    REFUSED = "refused"  # for memory; retried after ``refused_retry_runs`` eager runs
    FAILED = "failed"  # warm-up or capture raised, here or on another rank

    def __str__(self) -> str:
        return self.value


class Vote(enum.IntEnum):
    """A rank's capture decision; ranks take the lowest (``agree``), so one failure fails the key on all."""

    FAIL = 0
    REFUSE = 1
    CAPTURE = 2


@dataclass
class KeyStats:
    """Bookkeeping of one key (reported by ``runner.info()["keys"]``)."""

    key: GraphKey
    status: KeyStatus = KeyStatus.UNCAPTURED
    captured: Captured | None = None
    pool_bytes: int = 0
    warmup_peak_bytes: int = 0
    capture_seconds: float = 0.0
    instantiate_seconds: float = 0.0  # its executable graph and fused launch (stepgraph.capture)
    warmup_seconds: float = 0.0  # the eager run(s) before the capture, last attempt
    compile_seconds: float = 0.0  # torch.compile during this key's warm-ups (stepgraph.compile)
    replays: int = 0
    eager_runs: int = 0
    padded_rows: int = 0
    runs_since_refusal: int = 0
    refusals: int = 0
    failures: int = 0
    error: str | None = None
    cause: str | None = None
    hook: ReplayHook | None = None  # the key's before_replay hook, made when the key is first met

    def as_dict(self) -> dict:
        return {
            "status": str(self.status),
            "children": [c.info() for c in self.captured.children] if self.captured is not None else [],
            "pool_bytes": self.pool_bytes,
            "warmup_peak_bytes": self.warmup_peak_bytes,
            "capture_ms": round(self.capture_seconds * 1e3, 3),
            "instantiate_ms": round(self.instantiate_seconds * 1e3, 3),
            "warmup_ms": round(self.warmup_seconds * 1e3, 3),
            "compile_s": round(self.compile_seconds, 3),
            "replays": self.replays,
            "eager_runs": self.eager_runs,
            "padded_rows": self.padded_rows,
            "refusals": self.refusals,
            "failures": self.failures,
            "error": self.error,
            "cause": self.cause,
        }


class KeyTable:
    """Every key's stats and graph, and the capture of one key (see the module docstring).

    Parameters
    ----------
    backend:
        The graph backend, or ``None`` when graphs are unavailable (every key runs eagerly).
    guard:
        The memory check before each capture.
    agree:
        ``agree(vote) -> lowest vote over all ranks`` (tensor parallelism), or ``None`` for one rank.
    parked:
        A context manager factory that parks state outside the buffers while a key is captured.
    before_capture:
        ``before_capture(key) -> children``: runs after the memory check, before the capture (e.g. capturing
        per-stage graphs), and returns the graphs the step will splice, which the key's graph then holds.
    before_replay:
        ``before_replay(key) -> hook``: makes each key's host-side hook once (see
        :class:`~stepgraph.runner.StepGraphRunner`).
    """

    def __init__(
        self,
        *,
        name: str,
        config: RunnerConfig,
        backend: GraphBackend | None,
        guard: MemoryGuard,
        agree: Callable[[int], int] | None = None,
        parked: Callable[[], contextlib.AbstractContextManager] | None = None,
        before_capture: Callable[[GraphKey], Sequence[Child] | None] | None = None,
        before_replay: BeforeReplay | None = None,
    ) -> None:
        self.name, self.config, self.backend, self.guard = name, config, backend, guard
        self.agree = agree
        self.parked = parked or contextlib.nullcontext
        self.before_capture = before_capture
        self.before_replay = before_replay
        self.capture_failures = 0
        self._stats: dict[GraphKey, KeyStats] = {}
        self._oversize_hooks: dict[GraphKey, ReplayHook | None] = {}  # keys past the largest bucket
        self._captured: list[Captured] = []

    # -- reading ------------------------------------------------------------------------------------
    def stats(self, key: GraphKey) -> KeyStats:
        """The key's stats (made on first use, with the key's ``before_replay`` hook)."""
        s = self._stats.get(key)
        if s is None:
            s = self._stats[key] = KeyStats(key)
            s.hook = self.before_replay(key) if self.before_replay is not None else None
        return s

    def hook(self, key: GraphKey) -> ReplayHook | None:
        """The key's ``before_replay`` hook; an oversize key (no stats of its own) keeps one here too."""
        s = self._stats.get(key)
        if s is not None:
            return s.hook
        if self.before_replay is None:
            return None
        if key not in self._oversize_hooks:
            self._oversize_hooks[key] = self.before_replay(key)
        return self._oversize_hooks[key]

    @property
    def keys(self) -> Mapping[GraphKey, KeyStats]:
        """Every key met so far (read-only view)."""
        return self._stats

    def live(self) -> list[GraphKey]:
        """Keys that hold a graph now."""
        return [k for k, s in self._stats.items() if s.captured is not None]

    def should_capture(self, stats: KeyStats) -> bool:
        """Whether a run of this key should capture it first (on first use, or a refused key's retry)."""
        if self.backend is None or stats.captured is not None or not self.config.capture_on_first_use:
            return False
        if stats.status is KeyStatus.UNCAPTURED:
            return True
        return stats.status is KeyStatus.REFUSED and stats.runs_since_refusal >= self.config.refused_retry_runs

    # -- capture ------------------------------------------------------------------------------------
    def capture(self, key: GraphKey, buffers: StaticBuffers, call_step: CallStep) -> None:
        """Capture ``key`` on pad-filled buffers (restored afterwards), with the collector off.

        Records the outcome in the key's stats; raises :class:`CaptureError` only under
        ``on_capture_error="raise"``.
        """
        stats = self.stats(key)

        def step() -> dict[str, torch.Tensor]:
            return call_step(key)

        def plan() -> None:  # the host plans for the padded batch, before each warm-up and the capture
            if stats.hook is not None:
                stats.hook(key.batch_size)

        with frozen_gc(), self.padded(buffers, key.batch_size), self.parked():
            vote, captured, failure = self._decide(key, step, plan, buffers.fuser)
        if vote is Vote.REFUSE:
            stats.status, stats.runs_since_refusal = KeyStatus.REFUSED, 0
            stats.refusals += 1
        elif vote is Vote.FAIL:
            peer = ("peer_failed", "another rank failed to capture this key; every rank runs it eagerly")
            cause, text = failure or peer
            self._record_failure(stats, cause, text)
            if self.config.on_capture_error == "raise":
                raise CaptureError(f"capturing {key} failed: {text}", key=key, cause=cause) from None
        else:
            self._record_capture(stats, captured)

    @contextlib.contextmanager
    def padded(self, buffers: StaticBuffers, bs: int) -> Iterator[None]:
        """Pad-filled buffers for a capture (or a timing); the live rows come back afterwards (warm-ups must
        not advance the live batch)."""
        saved = {n: t[:bs].clone() for n, t in buffers.tensors.items() if buffers.specs[n].pad is not KEEP}
        buffers.pad_rows(list(saved), 0, bs)
        try:
            yield
        finally:
            for n, t in saved.items():
                buffers.tensors[n][:bs].copy_(t)

    def _decide(
        self, key: GraphKey, fn: Callable[[], dict], plan: Callable[[], None], fuser: Callable[[], Callable | None]
    ) -> tuple[Vote, Captured | None, tuple | None]:
        """Warm up, check memory, vote, capture and instantiate, vote again. Returns (vote, graph, failure).
        ``plan`` (the key's host hook) runs before each warm-up and before the capture, never inside it.
        ``fuser()`` gives what makes a graph's launch fused with the input copy (``None``: no such launch)."""
        stats = self.stats(key)
        failure = None
        compiling = seconds_compiling()

        def warm() -> dict:
            plan()
            return fn()

        try:
            t0 = time.perf_counter()
            run = self.backend.warmup(warm, self.config.warmup_iters)
            stats.warmup_seconds = time.perf_counter() - t0
            stats.warmup_peak_bytes = run.peak_bytes
            needed = stats.pool_bytes if stats.pool_bytes else run.peak_bytes
            vote = Vote.CAPTURE if self.guard.check(str(key), needed).allowed else Vote.REFUSE
        except Exception as e:  # noqa: BLE001 - reported, key falls back to eager
            failure, vote = _failure_of(e), Vote.FAIL
        stats.compile_seconds += seconds_compiling() - compiling
        vote = self._vote(vote)
        if vote is not Vote.CAPTURE:
            return vote, None, failure
        captured = None
        try:
            children = self.before_capture(key) if self.before_capture is not None else None
            plan()
            captured = self.backend.capture(fn, children or ())
            captured.draws_rng = run.draws_rng
            t0 = time.perf_counter()
            self.backend.instantiate(captured)
            fuse = None if run.draws_rng else fuser()  # a graph that draws needs replay()'s generator prologue
            captured.fused = (fuse is not None and fuse(captured.graph)) or False
            captured.instantiate_seconds = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001
            failure = _failure_of(e)
            if captured is not None:  # its instantiation failed
                self.backend.discard(captured)
                captured = None
        if self._vote(Vote.CAPTURE if captured is not None else Vote.FAIL) is not Vote.CAPTURE:
            if captured is not None:  # every rank replays a key or none does: a graph launch is collective
                self.backend.discard(captured)
            return Vote.FAIL, None, failure
        return Vote.CAPTURE, captured, None

    def _vote(self, vote: Vote) -> Vote:
        """This rank's vote, or the lowest vote over all ranks when ``agree`` is set."""
        return vote if self.agree is None else Vote(int(self.agree(int(vote))))

    def _record_capture(self, stats: KeyStats, captured: Captured) -> None:
        stats.captured, stats.status, stats.error, stats.cause = captured, KeyStatus.CAPTURED, None, None
        stats.pool_bytes = captured.pool_bytes + sum(c.pool_bytes for c in captured.children)
        stats.capture_seconds = captured.seconds + sum(c.seconds for c in captured.children)
        stats.instantiate_seconds = captured.instantiate_seconds
        self._captured.append(captured)
        log.info(
            "%s: captured key %s in %.1f ms (instantiated in %.1f ms), pool +%.1f MiB (warm-up peak %.1f MiB%s)",
            self.name,
            stats.key,
            captured.seconds * 1e3,
            captured.instantiate_seconds * 1e3,
            captured.pool_bytes / 2**20,
            stats.warmup_peak_bytes / 2**20,
            f", torch.compile {stats.compile_seconds:.1f} s" if stats.compile_seconds else "",
        )

    def _record_failure(self, stats: KeyStats, cause: str, text: str) -> None:
        stats.status, stats.cause, stats.error = KeyStatus.FAILED, cause, text
        stats.failures += 1
        self.capture_failures += 1
        if stats.failures == 1:
            log.warning("%s: capture of key %s failed (%s): %s", self.name, stats.key, cause, text)

    # -- recapture and release ----------------------------------------------------------------------
    def request_recapture(self, reason: str) -> None:
        """Refused (:class:`RecaptureRefused`) while graphs are live; else refused and failed keys may be
        captured again."""
        live = [str(k) for k in self.live()]
        if live:
            raise RecaptureRefused(
                f"recapture ({reason}) refused while the step graph is on "
                f"({len(live)} live graphs: {', '.join(live[:4])}"
                f"{'...' if len(live) > 4 else ''}); call runner.release() first, then capture again"
            )
        for s in self._stats.values():
            if s.status in (KeyStatus.REFUSED, KeyStatus.FAILED):
                s.status = KeyStatus.UNCAPTURED

    def release(self) -> None:
        """Tear every graph and the pool down; every key can be captured again."""
        if self.backend is not None:
            self.backend.release(self._captured)
        self._captured.clear()
        for s in self._stats.values():
            s.captured = None
            s.status = KeyStatus.UNCAPTURED


def _failure_of(e: Exception) -> tuple[str, str]:
    """``(cause, message)`` of a failed warm-up or capture; the exception itself is not kept (it would hold
    the step's tensors through its traceback)."""
    if isinstance(e, CaptureError):
        return e.cause, str(e)
    cause, hint = classify_capture_exception(e)
    return cause, f"{hint}. Cause: {type(e).__name__}: {e}"
