"""Warm-up at start: capture the keys of batch sizes 1..N (every bucket up to N's), then run one batch
through each, so that nothing is captured while serving. A size whose key is still missing gets
one more try, then a warning; the captured keys and the total time are logged."""

from __future__ import annotations

import logging
import math
import numbers
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from stepgraph.compile import seconds_compiling
from stepgraph.sampling import Sampling

log = logging.getLogger("stepgraph")


@dataclass
class WarmupReport:
    """What a warm-up did: sizes run, keys captured, sizes still without a graph, seconds (of which
    ``compile_seconds`` in torch.compile, :mod:`stepgraph.compile`)."""

    batch_sizes: list[int]
    captured_keys: list[str]
    missing: list[int]
    seconds: float
    compile_seconds: float = 0.0

    def as_dict(self) -> dict:
        return {
            "batch_sizes": self.batch_sizes,
            "captured_keys": self.captured_keys,
            "missing": self.missing,
            "seconds": round(self.seconds, 4),
            "compile_seconds": round(self.compile_seconds, 4),
        }


class Warmed(Protocol):
    """What :func:`warm_up` uses of a runner (:class:`~stepgraph.runner.StepGraphRunner`)."""

    name: str
    config: Any
    buckets: Any
    buffers: Any

    @property
    def graphs_available(self) -> bool: ...

    def key_for(
        self, batch_size: int, sampling: Any = ..., draft_len: int | None = None, penalised: bool = ...
    ) -> Any: ...

    def variants(self) -> list[tuple[int | None, bool]]: ...

    def capture(self, keys: Iterable | None = None) -> list: ...

    def run(self, inputs: Any = None, sampling: Any = ..., **kwargs: Any) -> Any: ...

    def stats(self, key: Any) -> Any: ...


def warm_up(
    runner: Warmed,
    max_running_requests: int | None,
    sampling: Sampling | str | int | Iterable[Sampling | str | int] | None,
    make_inputs: Callable[[int], Mapping[str, torch.Tensor]] | None,
) -> WarmupReport:
    """See :meth:`StepGraphRunner.warmup`: every batch size 1..N (a batch per bucket), for each sampling
    class given and each of the runner's variants (draft lengths, penalised and not)."""
    if max_running_requests is not None and (
        not isinstance(max_running_requests, numbers.Integral)
        or isinstance(max_running_requests, bool)
        or max_running_requests < 1
    ):
        raise ValueError(f"max_running_requests must be an int >= 1 (or None), got {max_running_requests!r}")
    t0, compiling = time.perf_counter(), seconds_compiling()
    if sampling is None:
        classes = [runner.config.default_sampling]
    elif isinstance(sampling, (Sampling, str, int)):
        classes = [Sampling.parse(sampling)]
    else:
        classes = list(dict.fromkeys(Sampling.parse(c) for c in sampling))
    cap = runner.config.max_warmup_batch or math.inf
    n = int(min(cap, runner.buckets.largest, max_running_requests or math.inf))
    sizes = list(range(1, n + 1))
    # a key per bucket: one batch each, of the largest size that pads to it (a bucket above n is never met)
    runs = list({runner.buckets.pad(k): k for k in sizes}.values())
    variants = [(c, d, p) for c in classes for d, p in runner.variants()]
    keys = {(k, *v): runner.key_for(k, *v) for k in runs for v in variants}
    runner.capture(keys.values())

    def batch(k: int, c: Sampling, d: int | None, p: bool) -> None:
        if make_inputs is None:
            runner.buffers.pad_rows(list(runner.buffers.specs), 0, runner.buckets.pad(k))
            runner.run(None, c, batch_size=k, draft_len=d, penalised=p)
        else:
            runner.run(make_inputs(k), c, draft_len=d, penalised=p)

    for run in keys:
        batch(*run)
    missing_buckets = set()
    if runner.graphs_available:
        for (k, *v), key in keys.items():
            if runner.stats(key).captured is None:  # one more try, then a warning
                runner.capture([key])
                batch(k, *v)
                if runner.stats(key).captured is None:
                    missing_buckets.add(runner.buckets.pad(k))
                    status = runner.stats(key).status
                    log.warning(
                        "%s: warm-up: batch size %d still has no graph (key %s: %s)", runner.name, k, key, status
                    )
    missing = [k for k in sizes if runner.buckets.pad(k) in missing_buckets]
    seconds, compiled = time.perf_counter() - t0, seconds_compiling() - compiling
    captured = sorted({str(key) for key in keys.values() if runner.stats(key).captured is not None})
    log.info(
        "%s: warm-up of batch sizes 1..%d took %.1f ms%s; captured keys: %s",
        runner.name,
        len(sizes),
        seconds * 1e3,
        f" ({compiled:.1f} s of it in torch.compile)" if compiled else "",
        ", ".join(captured) or "none",
    )
    return WarmupReport(sizes, captured, missing, seconds, compiled)
