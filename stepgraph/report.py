"""Capture reports: the runner's info dict, and that dict as rich tables (files: :mod:`stepgraph.report_file`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import torch
from rich import box
from rich.console import Console
from rich.table import Table

from stepgraph.keys import pad_waste, suggest_buckets


class Reported(Protocol):
    """What :func:`build_info` reads of a runner (:class:`~stepgraph.runner.StepGraphRunner`)."""

    name: str
    device: torch.device
    toggles: Any
    buckets: Any
    counters: Any
    guard: Any
    table: Any
    last_warmup: Any
    unavailable_reason: str | None

    @property
    def graphs_available(self) -> bool: ...

    @property
    def keys(self) -> Mapping: ...


def build_info(runner: Reported) -> dict:
    """The info dict of a :class:`~stepgraph.runner.StepGraphRunner` (see the README's "Info fields")."""
    c = runner.counters
    t = runner.toggles
    keys = runner.keys
    allocator = {"num_alloc_retries": None, "num_ooms": None}
    process_mem = None
    if runner.device.type == "cuda" and torch.cuda.is_available():
        from stepgraph.memory import TorchMemoryReader

        reader = TorchMemoryReader(runner.device)
        allocator = reader.allocator_counters()
        process_mem = reader.process_used()
    hist = dict(sorted(c.histogram.items()))
    in_range = {bs: n for bs, n in hist.items() if bs <= runner.buckets.largest}
    suggested = list(suggest_buckets(in_range, len(runner.buckets))) if in_range else []
    refusal = runner.guard.last_refusal
    return {
        "name": runner.name,
        "graphs_available": runner.graphs_available,
        "graphs_unavailable_reason": runner.unavailable_reason,
        "device": str(runner.device),
        "toggles": {"step_graph": t.step_graph, **t.pieces(), "debug": t.debug},
        "buckets": list(runner.buckets),
        "max_batch_size": runner.buckets.largest,
        "captured_keys": sorted(str(k) for k, s in keys.items() if s.captured is not None),
        "fused_copy_keys": sorted(str(k) for k, s in keys.items() if s.captured is not None and s.captured.fused),
        "memory_refusals": runner.guard.refusals,
        "last_memory_refusal": refusal.as_dict() if refusal else None,
        "cache_releases": runner.guard.cache_releases,
        "cache_release_budget_left": runner.guard.budget.remaining,
        "capture_failures": runner.table.capture_failures,
        **allocator,
        "process_gpu_memory": process_mem,
        "graph_pool_bytes": sum(s.pool_bytes for s in keys.values() if s.captured is not None),
        "runs": c.runs,
        "replays": sum(s.replays for s in keys.values()),
        "eager_runs": sum(s.eager_runs for s in keys.values()) + c.oversize_runs,
        "oversize_runs": c.oversize_runs,
        "padded_rows": sum(s.padded_rows for s in keys.values()),
        "batch_size_histogram": {str(k): v for k, v in hist.items()},
        "suggested_buckets": suggested,
        "pad_waste": {
            "current": pad_waste(in_range, runner.buckets) if in_range else 0,
            "suggested": pad_waste(in_range, suggested) if suggested else 0,
        },
        "warmup": runner.last_warmup.as_dict() if runner.last_warmup else None,
        "keys": {
            str(k): {**s.as_dict(), **({} if runner.graphs_available else {"status": "eager"})}
            for k, s in sorted(keys.items())
        },
    }


#: The longest text a table cell shows (a report's error texts can be long; rich wraps what it shows).
MAX_CELL = 240


def _mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}"


def _fixed(n, digits: int = 1) -> str:
    return "-" if n is None else f"{n:.{digits}f}"


def _times(n, factor: float):
    return None if n is None else n * factor


def _cell(value) -> str:
    text = str(value)
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 3] + "..."


def print_report(info: dict, console: Console | None = None) -> None:
    """Print one runner's info as two tables: the summary, then one row per key."""
    console = console or Console()
    summary = Table(title=f"stepgraph: {info.get('name', 'step')}", show_header=False, title_justify="left")
    summary.add_column("field", style="bold")
    summary.add_column("value", overflow="fold")
    graphs = "yes" if info.get("graphs_available") else f"no ({info.get('graphs_unavailable_reason')})"
    rows = [
        ("graphs", graphs),
        ("device", info.get("device")),
        ("buckets", str(info.get("buckets"))),
        ("captured keys", ", ".join(info.get("captured_keys", [])) or "none"),
        (
            "runs / replays / eager",
            f"{info.get('runs')} / {info.get('replays')} / {info.get('eager_runs')} "
            f"(oversize {info.get('oversize_runs')})",
        ),
        ("padded rows", str(info.get("padded_rows"))),
        ("graph pool", f"{_mib(info.get('graph_pool_bytes'))} MiB"),
        ("memory refusals", str(info.get("memory_refusals"))),
        ("cache releases", f"{info.get('cache_releases')} (budget left {info.get('cache_release_budget_left')})"),
        ("capture failures", str(info.get("capture_failures"))),
        ("allocator retries / OOMs", f"{info.get('num_alloc_retries')} / {info.get('num_ooms')}"),
        ("process GPU memory (NVML)", f"{_mib(info.get('process_gpu_memory'))} MiB"),
    ]
    refusal = info.get("last_memory_refusal")
    if refusal:
        rows.append(
            (
                "last refusal",
                f"{refusal['key']}: free {_mib(refusal['free'])} MiB, needed {_mib(refusal['needed'])} MiB, "
                f"reserved {_mib(refusal['reserved'])} MiB, allocated {_mib(refusal['allocated'])} MiB",
            )
        )
    waste = info.get("pad_waste") or {}
    if info.get("suggested_buckets"):
        if waste.get("suggested", 0) < waste.get("current", 0):
            advice = (
                f"{info['suggested_buckets']} (padded rows {waste['suggested']} instead of {waste['current']} "
                f"for the batch sizes seen)"
            )
        else:
            advice = f"the current ones (padded rows {waste.get('current')}: the fewest for the batch sizes seen)"
        rows.append(("suggested buckets", advice))
    warm = info.get("warmup")
    if warm:
        rows.append(
            (
                "warm-up",
                f"sizes 1..{len(warm['batch_sizes'])} in {_fixed(_times(warm['seconds'], 1e3))} ms"
                + (f" ({_fixed(warm['compile_seconds'])} s torch.compile)" if warm.get("compile_seconds") else "")
                + f"; missing {warm['missing'] or 'none'}",
            )
        )
    for forward, c in (info.get("compile") or {}).items():
        rows.append(
            (
                f"torch.compile {forward}",
                f"{c.get('backend')}: {c.get('compiles')} variants in {_fixed(c.get('seconds'))} s"
                + (f"; {c['failures']} running uncompiled ({c.get('error')})" if c.get("failures") else ""),
            )
        )
    toggles = info.get("toggles") or {}
    if toggles:
        rows.append(("toggles", ", ".join(f"{k}={'on' if v else 'off'}" for k, v in toggles.items())))
    for k, v in rows:
        summary.add_row(_cell(k), _cell(v))
    console.print(summary)

    # narrow terminals: keys never wrap or shorten, numbers keep their width, headers and notes fold
    keys = Table(
        title="keys: pool and warm-up peak in MiB, capture in ms, padded rows",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    widest = max((len(name) for name in info.get("keys") or {}), default=3)
    keys.add_column("key", no_wrap=True, min_width=widest)
    keys.add_column("status", overflow="fold")
    compiled = any(k.get("compile_s") for k in (info.get("keys") or {}).values())
    for col in ("pool", "peak", "ms", *(("compile s",) if compiled else ()), "replays", "eager", "pad"):
        keys.add_column(col, justify="right", overflow="fold")
    keys.add_column("note", overflow="fold")
    for name, k in (info.get("keys") or {}).items():
        note = k.get("cause") or ""
        if k.get("status") == "refused":
            note = f"memory ({k.get('refusals')}x)"
        keys.add_row(
            _cell(name),
            _cell(k.get("status")),
            _mib(k.get("pool_bytes")),
            _mib(k.get("warmup_peak_bytes")),
            _fixed(k.get("capture_ms", 0)),
            *((_fixed(k.get("compile_s", 0)),) if compiled else ()),
            str(k.get("replays")),
            str(k.get("eager_runs")),
            str(k.get("padded_rows")),
            _cell(note),
        )
    console.print(keys)
