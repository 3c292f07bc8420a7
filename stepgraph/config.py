"""Configuration dataclasses: the switches (mirroring the environment) and the runner's settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Literal

from stepgraph import envs
from stepgraph.keys import DEFAULT_BUCKETS, Buckets, Sampling

MiB = 1 << 20


@dataclass(frozen=True)
class Toggles:
    """The master switch and the eight piece toggles (``stepgraph.envs.PIECES``).

    ``step_graph`` turns whole-step capture on. Each piece is a resolved boolean: its environment
    variable if set, else the master switch. Build from the environment with :meth:`from_env`.
    """

    step_graph: bool = True
    fused_greedy_verify: bool = True
    two_launch_sampling: bool = True
    lean_sampled_verify: bool = True
    fused_tail: bool = True
    fused_relay: bool = True
    one_launch_copy: bool = True
    compile_forwards: bool = True
    tp_broadcast: bool = True
    debug: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, default_master: bool = True) -> Toggles:
        """Resolve the toggles from ``STEPGRAPH_*`` variables (see the README table)."""
        settings = envs.read(environ)
        master = default_master if settings.master is None else settings.master
        pieces = {name: master if value is None else value for name, value in settings.pieces.items()}
        return cls(step_graph=master, debug=bool(settings.debug), **pieces)

    @classmethod
    def all(cls, on: bool) -> Toggles:
        """Every piece and the master switch set to ``on``."""
        return cls(**{f.name: on for f in fields(cls) if f.name != "debug"})

    def with_piece(self, name: str, on: bool) -> Toggles:
        """A copy with one piece (config field name) changed."""
        if name not in self.piece_names():
            raise ValueError(f"unknown piece {name!r}; pieces are: {', '.join(self.piece_names())}")
        return replace(self, **{name: on})

    @staticmethod
    def piece_names() -> tuple[str, ...]:
        return tuple(field_name for field_name, _ in envs.PIECES.values())

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
        Eager runs on the capture stream before each capture (compiles, cuBLAS handles, allocator blocks).
    capture_on_first_use:
        Capture a key the first time :meth:`run` meets it (on dummy inputs, never on the live batch).
    refused_retry_runs:
        A key refused for memory is checked again after this many eager runs of it.
    on_capture_error:
        ``"eager"``: log once, count, and run the key eagerly. ``"raise"``: raise :class:`CaptureError`.
    default_sampling:
        Sampling class used by :meth:`warmup` when none is given.
    max_warmup_batch:
        :meth:`warmup` covers batch sizes 1..min(this, max_running_requests).
    capture_error_mode:
        CUDA stream capture mode; ``"thread_local"`` lets other threads use CUDA during capture.
    progress:
        Show a rich progress bar while capturing several keys (only when stderr is a terminal).
    toggles:
        The master switch and piece toggles; by default read from the environment.
    """

    buckets: tuple[int, ...] = DEFAULT_BUCKETS
    memory_margin_bytes: int = 256 * MiB
    warmup_iters: int = 2
    capture_on_first_use: bool = True
    refused_retry_runs: int = 64
    on_capture_error: CaptureErrorPolicy = "eager"
    default_sampling: Sampling = Sampling.GREEDY
    max_warmup_batch: int = 8
    capture_error_mode: Literal["global", "thread_local", "relaxed"] = "thread_local"
    progress: bool = True
    toggles: Toggles = field(default_factory=Toggles.from_env)

    def __post_init__(self) -> None:
        Buckets(self.buckets)  # validates
        if self.memory_margin_bytes < 0:
            raise ValueError(f"memory_margin_bytes must be >= 0, got {self.memory_margin_bytes}")
        if self.warmup_iters < 1:
            raise ValueError(f"warmup_iters must be >= 1 (Triton compiles and cuBLAS handles), got {self.warmup_iters}")
        if self.refused_retry_runs < 1:
            raise ValueError(f"refused_retry_runs must be >= 1, got {self.refused_retry_runs}")
        if self.on_capture_error not in ("eager", "raise"):
            raise ValueError(f"on_capture_error must be 'eager' or 'raise', got {self.on_capture_error!r}")
        if self.max_warmup_batch < 1:
            raise ValueError(f"max_warmup_batch must be >= 1, got {self.max_warmup_batch}")
        if self.capture_error_mode not in ("global", "thread_local", "relaxed"):
            raise ValueError(
                f"capture_error_mode must be global, thread_local or relaxed, got {self.capture_error_mode!r}"
            )
        object.__setattr__(self, "default_sampling", Sampling(self.default_sampling))
