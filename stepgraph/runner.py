"""StepGraphRunner: one CUDA graph per key (padded batch size x sampling class [x draft length]) for a step.

``run(inputs, sampling)`` pads the batch to its bucket, copies the inputs into static buffers, and
replays the key's graph, or runs the same step eagerly **at the same padded shape** when the key has no
graph (refused for memory, failed capture, oversize batch, no CUDA). Every run takes one path: resolve
where it goes (a :class:`_Route`, kept for captured keys), count it, call the key's ``before_replay``
hook, then copy in and replay, or run eagerly. Keys are captured by :meth:`capture` / :meth:`warmup`
ahead of serving, or on first use, always on pad-filled buffers (never on the live batch, whose state a
warm-up would advance); their lifecycle lives in :class:`~stepgraph.keytable.KeyTable`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import numbers
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from stepgraph import envs
from stepgraph.buffers import Buffer, StaticBuffers
from stepgraph.capture import Child, CudaGraphBackend, GraphBackend, capture_progress, graphs_unavailable_reason
from stepgraph.config import RunnerConfig, Toggles
from stepgraph.graphs import frozen_gc
from stepgraph.keys import Buckets, GraphKey, draft_lengths
from stepgraph.keytable import BeforeReplay, KeyStats, KeyStatus, KeyTable, ReplayHook
from stepgraph.memory import MemoryGuard
from stepgraph.outputs import StepOutputs, poison
from stepgraph.report import build_info, print_report
from stepgraph.sampling import Sampling
from stepgraph.warmup import WarmupReport, warm_up

if TYPE_CHECKING:
    from rich.console import Console

log = logging.getLogger("stepgraph")

#: ``step(buffers, batch_size, sampling) -> {name: tensor}``, or with ``draft_lens``
#: ``step(buffers, batch_size, sampling, draft_len)``; a penalised key adds ``penalised=True``.
StepFn = Callable[..., Mapping[str, torch.Tensor]]

__all__ = [
    "BeforeReplay",
    "KeyStats",
    "KeyStatus",
    "ReplayHook",
    "RunCounters",
    "StepFn",
    "StepGraphRunner",
    "WarmupReport",
]


@dataclass
class RunCounters:
    """Counts over every run (per-key counts live in :class:`~stepgraph.keytable.KeyStats`)."""

    runs: int = 0
    oversize_runs: int = 0
    histogram: Counter = field(default_factory=Counter)  # real batch size -> runs


class _Route:
    """Where the runs of one (real batch size, sampling class, draft length, penalised) go, resolved once: the
    key, its stats and graph (``None`` for an oversize batch, eager at its own size), the padded size, the
    outputs handed out (views of the graph's outputs sliced to the real batch) and the key's ``before_replay``
    hook."""

    __slots__ = ("key", "stats", "captured", "real", "padded", "views", "hook")  # key: GraphKey

    def __init__(self, key, stats, captured, real, padded, hook) -> None:
        self.key, self.stats, self.captured, self.real, self.padded, self.hook = (
            key,
            stats,
            captured,
            real,
            padded,
            hook,
        )
        self.views = None if captured is None else {k: v[:real] for k, v in captured.outputs.items()}


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
        With ``draft_lens`` it is called ``step(buffers, batch_size, sampling, draft_len)``, and with
        ``penalised_keys`` the penalised keys' calls add ``penalised=True``.
    buffers:
        ``{name: Buffer(...)}`` declarations (or a built :class:`StaticBuffers`). The leading dimension
        is the largest batch.
    device:
        Where the buffers live (default: CUDA if available, else CPU).
    config:
        :class:`RunnerConfig`; toggles default to the environment.
    draft_lens:
        The draft lengths the step comes in (each a key of its own: ``GraphKey.draft_len``); ``None`` for a
        step without one. :meth:`run` then takes ``draft_len=`` (default: the first of them).
    penalised_keys:
        Whether the step also comes penalised (``GraphKey.penalised``: it applies the requests' penalties,
        which a batch without any skips). :meth:`run` then takes ``penalised=``; :meth:`warmup` and
        :meth:`capture` cover both variants.
    backend:
        A :class:`~stepgraph.capture.GraphBackend` (default: CUDA graphs when available). Tests inject a
        simulated one, which replaces the device check but not the switch: ``step_graph=False`` runs
        eagerly whatever the backend.
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
        ``before_capture(key) -> children`` runs after the memory check and before the key's capture (e.g.
        capturing per-stage graphs) and returns the graphs the step splices (:mod:`stepgraph.splice`),
        which the key's graph holds while alive.
    before_replay:
        ``before_replay(key) -> hook`` is called once per key, when the runner first meets it; the hook it
        returns (or ``None``) is the key's host-side state, kept in its stats, and is called
        ``hook(batch_size)`` with the real batch size before every replay and every eager run of the key,
        and with the padded size before its warm-ups and capture. A backend that plans on the host before
        each replay keeps its planner there, one per key (FlashInfer's CUDA-graph wrappers: one per batch
        size). Under ``draft_lens`` and oversize batches, every distinct key gets its own.
    """

    def __init__(
        self,
        step: StepFn,
        buffers: Mapping[str, Buffer] | StaticBuffers,
        *,
        device: torch.device | str | None = None,
        config: RunnerConfig | None = None,
        backend: GraphBackend | None = None,
        guard: MemoryGuard | None = None,
        agree: Callable[[int], int] | None = None,
        parked: Callable[[], contextlib.AbstractContextManager] | None = None,
        before_capture: Callable[[GraphKey], Sequence[Child] | None] | None = None,
        before_replay: BeforeReplay | None = None,
        draft_lens: Sequence[int] | None = None,
        penalised_keys: bool = False,
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
        self.draft_lens = None if draft_lens is None else draft_lengths(draft_lens, "draft_lens")
        self.penalised_keys = bool(penalised_keys)
        self.counters = RunCounters()
        self.last_warmup: WarmupReport | None = None
        self._generation = 0
        self._poison: list[torch.Tensor] = []
        self._routes: dict[tuple[int | None, Sampling, int | None, bool], _Route] = {}  # captured keys' routes
        self._lock = threading.RLock()  # run / capture / warm-up / release, one thread at a time

        reason = None if backend is not None else graphs_unavailable_reason(self.device)  # the device first
        if reason is None and not self.toggles.step_graph:
            variable = Toggles.variable("step_graph")
            if envs.read_switches(Toggles.variables()).get(variable) is False:
                reason = f"the step graph is switched off by {variable}=0 in the environment; it runs eagerly"
            else:
                reason = (
                    "the step graph is switched off by the runner's config (Toggles(step_graph=False)); it runs eagerly"
                )
        self.unavailable_reason = reason
        self.backend: GraphBackend | None = None
        if reason is None:
            self.backend = backend or CudaGraphBackend(self.device, capture_error_mode=self.config.capture_error_mode)
        reader = self.backend.reader if self.backend is not None else None
        self.guard = guard or MemoryGuard.default(reader, self.config.memory_margin_bytes)
        self.table = KeyTable(
            name=name,
            config=self.config,
            backend=self.backend,
            guard=self.guard,
            agree=agree,
            parked=parked,
            before_capture=before_capture,
            before_replay=before_replay,
        )

    # ------------------------------------------------------------------------------------------------
    @property
    def graphs_available(self) -> bool:
        return self.backend is not None

    @property
    def generation(self) -> int:
        """Counts runs (and releases); outputs handed out by an earlier generation are stale."""
        return self._generation

    @property
    def agree(self) -> Callable[[int], int] | None:
        """The ranks' vote hook (see the class docstring); settable."""
        return self.table.agree

    @agree.setter
    def agree(self, hook: Callable[[int], int] | None) -> None:
        self.table.agree = hook

    @property
    def keys(self) -> Mapping[GraphKey, KeyStats]:
        """Every key met so far and its stats."""
        return self.table.keys

    def key_for(
        self,
        batch_size: int,
        sampling: Sampling | str | int = Sampling.GREEDY,
        draft_len: int | None = None,
        penalised: bool = False,
    ) -> GraphKey | None:
        """The key a batch of ``batch_size`` runs under, or ``None`` when it exceeds the largest bucket."""
        padded = self.buckets.pad(batch_size)
        if padded is None:
            return None
        return GraphKey(padded, Sampling.parse(sampling), self._draft_len(draft_len), self._penalised(penalised))

    def stats(self, key: GraphKey) -> KeyStats:
        """The key's stats (status, graph, memory, counts)."""
        return self.table.stats(key)

    # ------------------------------------------------------------------------------------------------
    def run(
        self,
        inputs: Mapping[str, torch.Tensor] | None = None,
        sampling: Sampling | str | int = Sampling.GREEDY,
        *,
        batch_size: int | None = None,
        draft_len: int | None = None,
        penalised: bool = False,
        copy_outputs: bool = False,
    ) -> StepOutputs:
        """Run one step for a batch.

        Parameters
        ----------
        inputs:
            ``{name: tensor}`` with the batch first, ``(B, *row)``, matching the declared dtype; on the
            buffers' device or on the host (a 1-D integer or bool buffer also takes a list of ``B`` ints,
            written straight into pinned memory). Buffers not named keep their content (step state).
        sampling:
            The batch's sampling class (the most general one present).
        batch_size:
            Required when ``inputs`` is empty (the inputs are already in the buffers).
        draft_len:
            The step's draft length, one of ``draft_lens`` (default: the first); ``None`` for a runner
            without draft lengths.
        penalised:
            Run the penalised key (a runner with ``penalised_keys``): some request of the batch sets a
            penalty.
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
            if inputs is not None and type(inputs) is not dict and not isinstance(inputs, Mapping):
                raise TypeError(f"inputs must be a mapping of buffer name -> tensor, got {type(inputs).__name__}")
            if batch_size is not None and (type(batch_size) is not int or batch_size < 1):
                batch_size = _batch_size(batch_size)
            real = self.buffers.stage(inputs, batch_size) if inputs else batch_size  # checked and staged
            route = self._routes.get((real, sampling, draft_len, penalised))
            if route is None:
                try:
                    staged = self.buffers.stage({}, real) if not inputs else real
                    route = self._route(staged, sampling, draft_len, penalised)
                except BaseException:
                    self.buffers.abandon()  # a raise before the copy: it never lands later
                    raise
            # every run, whatever its route: the counts, the key's hook, then replay or the eager step
            self._generation += 1
            counters = self.counters
            counters.runs += 1
            counters.histogram[real] += 1
            if self._poison:
                poison(self._poison)
                self._poison.clear()
            if route.hook is not None:
                route.hook(real)
            stats, captured = route.stats, route.captured
            if captured is None:
                return self._run_eagerly(route, copy_outputs)
            stats.padded_rows += route.padded - real
            if not (inputs and self.buffers.commit(route.padded, captured.fused or None)):  # launched together?
                captured.replay()
            stats.replays += 1
            if copy_outputs or self.toggles.debug:
                return self._hand_out(route.views, copy_outputs)
            return StepOutputs(route.views, self, self._generation)

    def _route(self, real: int, sampling: Sampling, draft_len: int | None, penalised: bool) -> _Route:
        """Where a run goes (its key captured first when due); kept for the next runs of a captured key."""
        asked = (draft_len, penalised)
        draft_len, penalised = self._draft_len(draft_len), self._penalised(penalised)
        padded = self.buckets.pad(real)
        if padded is None:  # larger than the largest bucket: eager at its own size, counted
            key = GraphKey(real, sampling, draft_len, penalised)
            return _Route(key, None, None, real, real, self.table.hook(key))
        key = GraphKey(padded, sampling, draft_len, penalised)
        stats = self.table.stats(key)
        if self.table.should_capture(stats):
            self.table.capture(key, self.buffers, self._call_step)  # the staged copy lands after it
        route = _Route(key, stats, stats.captured, real, padded, self.table.hook(key))
        if route.captured is not None:  # under what it was asked as (draft_len=None: the first of them)
            self._routes[(real, sampling, draft_len, penalised)] = self._routes[(real, sampling, *asked)] = route
        return route

    def _run_eagerly(self, route: _Route, copy_outputs: bool) -> StepOutputs:
        """A key without a graph (or an oversize batch): the step itself at the padded shape."""
        stats = route.stats
        self.buffers.commit(route.padded)
        if stats is None:
            self.counters.oversize_runs += 1
        else:
            stats.padded_rows += route.padded - route.real
            stats.eager_runs += 1
            if stats.status is KeyStatus.REFUSED:
                stats.runs_since_refusal += 1
        out = self._call_step(route.key)
        real = route.real
        return self._hand_out({k: v if v.shape[0] == real else v[:real] for k, v in out.items()}, copy_outputs)

    def _call_step(self, key: GraphKey) -> dict[str, torch.Tensor]:
        """The step at ``key``'s shape (its batch size the padded one, or an oversize batch's own)."""
        batch = key.batch_size
        args = (self.buffers.views(batch), batch, key.sampling) + (() if key.draft_len is None else (key.draft_len,))
        out = self.step(*args, penalised=True) if key.penalised else self.step(*args)
        if not isinstance(out, Mapping):
            raise TypeError(f"the step function must return a mapping of name -> tensor, got {type(out).__name__}")
        for name, t in out.items():
            if not isinstance(t, torch.Tensor) or t.dim() == 0 or t.shape[0] != batch:
                shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"step output {name!r} has shape {shape}; outputs must have the batch ({batch}) first")
        return dict(out)

    def _hand_out(self, tensors: dict[str, torch.Tensor], copy: bool) -> StepOutputs:
        """Outputs (sliced to the real batch): views valid until the next run, or copies."""
        if copy:
            return StepOutputs({k: v.clone() for k, v in tensors.items()}, None, self._generation)
        if self.toggles.debug:
            tensors = {k: v.clone() for k, v in tensors.items()}
            self._poison.extend(tensors.values())
        return StepOutputs(tensors, self, self._generation)

    # ------------------------------------------------------------------------------------------------
    @_serialised
    def capture(self, keys: Iterable[GraphKey | tuple[int, Sampling | str]] | None = None) -> list[GraphKey]:
        """Capture ``keys`` (default: every bucket with the default sampling, at each draft length, penalised and
        not), largest first.

        Keys already captured are skipped. Returns the keys that have a graph afterwards. A key that is
        refused or fails runs eagerly (``on_capture_error="raise"`` raises :class:`CaptureError`).
        """
        if self.backend is None:
            log.info("%s: no graphs to capture: %s", self.name, self.unavailable_reason)
            return []
        if keys is None:
            sampling = self.config.default_sampling
            keys = [GraphKey(b, sampling, k, p) for b in self.buckets for k, p in self.variants()]
        todo = sorted(
            {self._key(k) for k in keys},
            key=lambda k: (-k.batch_size, -int(k.sampling), -(k.draft_len or 0), -k.penalised),
        )
        todo = [k for k in todo if self.table.stats(k).captured is None]
        with frozen_gc(), capture_progress(self.config.progress and len(todo) > 1, len(todo), self.name) as advance:
            for key in todo:
                self.table.capture(key, self.buffers, self._call_step)
                advance(str(key))
        return self.table.live()

    @_serialised
    def warmup(
        self,
        max_running_requests: int | None = None,
        sampling: Sampling | str | int | Iterable[Sampling | str | int] | None = None,
        make_inputs: Callable[[int], Mapping[str, torch.Tensor]] | None = None,
    ) -> WarmupReport:
        """Capture the keys of batch sizes 1..N, then run one batch through each (the largest size that pads
        to its bucket), so that serving up to N requests never captures.

        ``N = min(config.max_warmup_batch, largest bucket, max_running_requests)``; for each sampling class
        given (one or several; default ``config.default_sampling``) and each of the step's draft lengths,
        penalised and not (``penalised_keys``).
        ``make_inputs(k)`` gives inputs for a batch of ``k`` (default: the buffers' pad values, which must
        make a row a no-op).
        A size whose key is still missing gets one more batch, then a warning. Logs the captured keys
        and the total time.
        """
        self.last_warmup = warm_up(self, max_running_requests, sampling, make_inputs)
        return self.last_warmup

    @_serialised
    def time_key(self, key: GraphKey, repeats: int | None = None) -> float:
        """Milliseconds per step of ``key`` run back to back on pad-filled buffers (their live rows restored
        afterwards, outside state parked): the replay of its graph (captured first where it can be), or
        the eager step. What the runs do is not counted in :meth:`info`. For policies that choose keys by
        their cost (a draft length, say). ``repeats``: default 10 with graphs, 3 eagerly."""
        key = self._key(key)
        repeats = repeats or (10 if self.backend is not None else 3)
        stats = self.table.stats(key)
        if self.table.should_capture(stats):
            self.table.capture(key, self.buffers, self._call_step)
        with self.table.padded(self.buffers, key.batch_size), self.table.parked():
            if stats.hook is not None:
                stats.hook(key.batch_size)
            if stats.captured is not None:
                once = stats.captured.replay
            else:

                def once() -> None:
                    self._call_step(key)

            once()
            _synchronize(self.device)
            t0 = time.perf_counter()
            for _ in range(repeats):
                once()
            _synchronize(self.device)
            return (time.perf_counter() - t0) / repeats * 1e3

    @_serialised
    def request_recapture(self, reason: str = "weight update") -> None:
        """Ask for the graphs to be captured again (e.g. after weights moved to new tensors).

        Raises
        ------
        RecaptureRefused
            While graphs are live: replaying them after a recapture request would read stale addresses.
            Call :meth:`release` first; the next :meth:`capture`, :meth:`warmup` or run captures again.
        """
        self.table.request_recapture(reason)

    @_serialised
    def release(self) -> None:
        """Tear down every key's graph and the shared pool; keys can be captured again afterwards. The input
        copy's own small graph (captured once, on its private pool) stays for them until the runner goes.

        ``torch.cuda.memory_reserved()`` returns to its level before the captures. cuBLAS keeps the
        workspace it made for the capture stream (32 MiB by default, ``CUBLAS_WORKSPACE_CONFIG``); when no
        graph is live anywhere in the process, ``torch._C._cuda_clearCublasWorkspaces()`` frees it too.
        """
        self.table.release()
        self._routes.clear()
        self._generation += 1

    # ------------------------------------------------------------------------------------------------
    def info(self) -> dict:
        """Counters and per-key figures (see the README's "Info fields")."""
        return build_info(self)

    def print_report(self, console: Console | None = None) -> None:
        """Print :meth:`info` as tables (rich; to ``console`` or standard output)."""
        print_report(self.info(), console=console)

    # ------------------------------------------------------------------------------------------------
    def variants(self) -> list[tuple[int | None, bool]]:
        """Each ``(draft_len, penalised)`` the step comes in, per batch size and sampling class."""
        penalised = (False, True) if self.penalised_keys else (False,)
        return [(k, p) for k in self.draft_lens or (None,) for p in penalised]

    def _penalised(self, penalised: bool) -> bool:
        """``penalised`` checked against ``penalised_keys``."""
        if penalised and not self.penalised_keys:
            raise ValueError(
                f"penalised={penalised!r}: this runner's step has no penalised keys (penalised_keys=False)"
            )
        return bool(penalised)

    def _draft_len(self, draft_len: int | None) -> int | None:
        """``draft_len`` checked against ``draft_lens`` (``None``: the first of them, or none at all)."""
        if not self.draft_lens:
            if draft_len is not None:
                raise ValueError(f"draft_len={draft_len!r}: this runner's step has no draft lengths (draft_lens=None)")
            return None
        if draft_len is None:
            return self.draft_lens[0]
        if draft_len not in self.draft_lens:
            raise ValueError(f"draft_len={draft_len!r} is not one of the step's draft lengths {list(self.draft_lens)}")
        return draft_len

    def _key(self, key: GraphKey | tuple) -> GraphKey:
        """A key given to :meth:`capture` (a :class:`GraphKey` or a tuple), its batch a bucket and its draft
        length and penalised checked."""
        key = self.buckets.key(key)
        draft_len, penalised = self._draft_len(key.draft_len), self._penalised(key.penalised)
        return GraphKey(key.batch_size, key.sampling, draft_len, penalised)


def _batch_size(value: object) -> int:
    """``run(batch_size=...)`` as an int, or the error that names it (an int of another type is taken)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if value < 1:
            raise ValueError(f"empty batch: batch_size must be >= 1, got {value}")
        return int(value)
    raise TypeError(f"batch_size must be an int, got {value!r} ({type(value).__name__})")


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
