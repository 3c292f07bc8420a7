"""Configuration dataclasses: the switches (each declared once, with its environment variable) and the
runner's settings."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Literal

from stepgraph import envs
from stepgraph.keys import DEFAULT_BUCKETS, Buckets
from stepgraph.sampling import Sampling

MiB = 1 << 20


def _switch(kind: str, variable: str, doc: str, default: bool = True):
    return field(default=default, metadata={"kind": kind, "variable": variable, "doc": doc})


def _piece(variable: str, doc: str):
    return _switch("piece", variable, doc)


@dataclass(frozen=True)
class Toggles:
    """The master switch, the piece toggles and debug mode. Each is declared here once, with the environment
    variable that sets it and what it does; :meth:`from_env`, ``stepgraph bisect`` and the README's table
    read these declarations.

    ``step_graph`` turns whole-step capture on. A piece is a resolved boolean: its variable if set (``0``
    off, ``1`` on), else the master switch. Greedy output is bitwise identical for every combination.
    """

    step_graph: bool = _switch(
        "master",
        "STEPGRAPH_ENABLE",
        "master switch: capture each step as one CUDA graph and turn every piece on (default 1)",
    )
    fused_greedy_verify: bool = _piece(
        "STEPGRAPH_FUSED_GREEDY_VERIFY",
        "greedy verify: one fused two-stage Triton argmax + chain acceptance (off: torch composite)",
    )
    two_launch_sampling: bool = _piece(
        "STEPGRAPH_TWO_LAUNCH_SAMPLING",
        "stepgraph's sampling kernel wherever it applies: the lean sampled verify and the prefill's first "
        "sampled token (off: their torch implementations; the general tree path is torch either way)",
    )
    dependent_launch: bool = _piece(
        "STEPGRAPH_DEPENDENT_LAUNCH",
        "each launch of stepgraph's sampling kernel starts as a programmatic dependent of the kernel before it "
        "on sm_90 and later: placed while that one runs, it waits for it first (off: plain stream order)",
    )
    lean_sampled_verify: bool = _piece(
        "STEPGRAPH_LEAN_SAMPLED_VERIFY",
        "sampled verify specialised for chains (off: the general tree path over materialised probabilities)",
    )
    fused_tail: bool = _piece(
        "STEPGRAPH_FUSED_TAIL",
        "every topk-1 draft token from the two-stage Triton argmax: the K-1 draft steps and the draft-extend "
        "tail, whose launch also gathers the selected hidden rows (off: torch argmax and indexing)",
    )
    fused_logprobs: bool = _piece(
        "STEPGRAPH_FUSED_LOGPROBS",
        "log-probabilities and top alternatives of the emitted tokens from three or four Triton launches, no sort "
        "and no float32 copy of the logits (off: their torch reference, a topk over the vocabulary)",
    )
    fused_relay: bool = _piece(
        "STEPGRAPH_FUSED_RELAY",
        "relay traffic in one launch each: the step's gather of its requests' slots and its store into them; "
        "a batch of one reads and writes slot 0 through views, no launch (off: one copy per field)",
    )
    one_launch_copy: bool = _piece(
        "STEPGRAPH_ONE_LAUNCH_COPY",
        "the runner's copy-in: every input of a run and its padding in one launch, made one launch with the "
        "key's graph where that graph draws nothing from torch's generators (off: one copy per tensor)",
    )
    compile_forwards: bool = _piece(
        "STEPGRAPH_COMPILE",
        "torch.compile (inductor's kernels, captured into the step graph) of the target and draft forwards of "
        "a decoder built with compile=True (off: the forwards run as written)",
    )
    penalty_variants: bool = _piece(
        "STEPGRAPH_PENALTY_VARIANTS",
        "a decoder built with penalties=True runs the batches where no request sets a penalty, logit bias, ban or "
        "allowed tokens through keys without the penalties' float32 copy and kernels (off: every step applies them)",
    )
    prefill_graph: bool = _piece(
        "STEPGRAPH_PREFILL_GRAPH",
        "chunked prefill's forward of several requests' chunks captured as one graph per number of chunks "
        "(off: the same forward eagerly)",
    )
    tp_broadcast: bool = _piece(
        "STEPGRAPH_TP_BROADCAST",
        "one packed broadcast of the verify result across tensor-parallel ranks (off: one per field)",
    )
    debug: bool = _switch(
        "debug",
        "STEPGRAPH_DEBUG",
        "debug mode: outputs handed out by run() are copies that are poisoned on the next run (default 0)",
        default=False,
    )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, default_master: bool = True) -> Toggles:
        """Resolve the toggles from ``STEPGRAPH_*`` variables (see the README table)."""
        values = envs.read_switches(cls.variables(), environ)
        resolved = {f.name: values[f.metadata["variable"]] for f in fields(cls)}
        master = default_master if resolved["step_graph"] is None else resolved["step_graph"]
        pieces = {name: master if resolved[name] is None else resolved[name] for name in cls.piece_names()}
        return cls(step_graph=master, debug=bool(resolved["debug"]), **pieces)

    @classmethod
    def all(cls, on: bool) -> Toggles:
        """Every piece and the master switch set to ``on``."""
        return cls(**{f.name: on for f in fields(cls) if f.metadata["kind"] != "debug"})

    def with_piece(self, name: str, on: bool) -> Toggles:
        """A copy with one piece (config field name) changed."""
        if name not in self.piece_names():
            raise ValueError(f"unknown piece {name!r}; pieces are: {', '.join(self.piece_names())}")
        return replace(self, **{name: on})

    @classmethod
    def piece_names(cls) -> tuple[str, ...]:
        """The pieces' field names, in declaration order."""
        return tuple(f.name for f in fields(cls) if f.metadata["kind"] == "piece")

    @classmethod
    def variables(cls) -> dict[str, str]:
        """Every declared environment variable -> what it switches (the README's table)."""
        return {f.metadata["variable"]: f.metadata["doc"] for f in fields(cls)}

    @classmethod
    def variable(cls, name: str) -> str:
        """The environment variable of the switch stored in field ``name``."""
        for f in fields(cls):
            if f.name == name:
                return f.metadata["variable"]
        raise KeyError(name)

    def pieces(self) -> dict[str, bool]:
        return {name: getattr(self, name) for name in self.piece_names()}


CaptureErrorPolicy = Literal["eager", "raise"]


@dataclass(frozen=True)
class RunnerConfig:
    """Settings of a :class:`~stepgraph.runner.StepGraphRunner`.

    Parameters
    ----------
    buckets:
        Padded batch sizes that get a graph; a batch pads up to the smallest that fits.
    memory_margin_bytes:
        Free memory that must remain after a capture; a key is refused if its estimate does not fit.
    warmup_iters:
        Eager runs on the capture stream before each capture (compiles, cuBLAS handles, allocator blocks);
        the last with host syncs raising. With 1, a run that syncs gets one unguarded run more, then the
        guarded one again: only a step that syncs every time is refused.
    capture_on_first_use:
        Capture a key the first time :meth:`run` meets it (on dummy inputs, never on the live batch).
    refused_retry_runs:
        A key refused for memory is checked again after this many eager runs of it.
    on_capture_error:
        ``"eager"``: log once, count, and run the key eagerly. ``"raise"``: raise :class:`CaptureError`.
    default_sampling:
        Sampling class used by :meth:`warmup` when none is given.
    max_warmup_batch:
        :meth:`warmup` covers batch sizes 1..min(this, max_running_requests); ``None`` (the default): up to
        the largest bucket, so that serving never captures.
    capture_error_mode:
        CUDA stream capture mode; ``"thread_local"`` lets other threads use CUDA during capture.
    progress:
        Show a rich progress bar while capturing several keys (only when stderr is a terminal).
    toggles:
        The master switch and piece toggles; by default read from the environment.
    """

    buckets: tuple[int, ...] = DEFAULT_BUCKETS
    memory_margin_bytes: int = 256 * MiB
    warmup_iters: int = 1
    capture_on_first_use: bool = True
    refused_retry_runs: int = 64
    on_capture_error: CaptureErrorPolicy = "eager"
    default_sampling: Sampling = Sampling.GREEDY
    max_warmup_batch: int | None = None
    capture_error_mode: Literal["global", "thread_local", "relaxed"] = "thread_local"
    progress: bool = True
    toggles: Toggles = field(default_factory=Toggles.from_env)

    def __post_init__(self) -> None:
        Buckets(self.buckets)  # validates
        for name in ("memory_margin_bytes", "warmup_iters", "refused_retry_runs", "max_warmup_batch"):
            value = getattr(self, name)
            if value is None and name == "max_warmup_batch":
                continue
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                what = "an int or None" if name == "max_warmup_batch" else "an int"
                raise TypeError(f"RunnerConfig.{name} must be {what}, got {value!r} ({type(value).__name__})")
        if self.memory_margin_bytes < 0:
            raise ValueError(f"memory_margin_bytes must be >= 0, got {self.memory_margin_bytes}")
        if self.warmup_iters < 1:
            raise ValueError(f"warmup_iters must be >= 1 (Triton compiles and cuBLAS handles), got {self.warmup_iters}")
        if self.refused_retry_runs < 1:
            raise ValueError(f"refused_retry_runs must be >= 1, got {self.refused_retry_runs}")
        if self.on_capture_error not in ("eager", "raise"):
            raise ValueError(f"on_capture_error must be 'eager' or 'raise', got {self.on_capture_error!r}")
        if self.max_warmup_batch is not None and self.max_warmup_batch < 1:
            raise ValueError(f"max_warmup_batch must be >= 1, got {self.max_warmup_batch}")
        if self.capture_error_mode not in ("global", "thread_local", "relaxed"):
            raise ValueError(
                f"capture_error_mode must be global, thread_local or relaxed, got {self.capture_error_mode!r}"
            )
        object.__setattr__(self, "default_sampling", Sampling.parse(self.default_sampling))
