"""Capture reports: the runner's info dict as rich tables, and JSON export/import."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table


def _mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}"


def save_report(info: dict, path: str | Path, **extra) -> Path:
    """Write ``info`` (plus ``extra`` top-level fields) as JSON; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**info, **extra}, indent=2, default=str))
    return path


def load_report(path: str | Path) -> dict:
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or ("keys" not in data and "runners" not in data):
        raise ValueError(f"{path} is not a stepgraph report (no 'keys' field); write one with runner.info() or --json")
    return data


def runner_infos(report: dict) -> list[dict]:
    """A saved file holds one runner's info, or a demo/bench record with ``runners: [...]``."""
    return list(report.get("runners", [])) or [report]


def print_report(info: dict, console: Console | None = None) -> None:
    """Print one runner's info as two tables: the summary, then one row per key."""
    console = console or Console()
    summary = Table(title=f"stepgraph: {info.get('name', 'step')}", show_header=False, title_justify="left")
    summary.add_column("field", style="bold")
    summary.add_column("value")
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
        rows.append(
            (
                "suggested buckets",
                f"{info['suggested_buckets']} (padded rows {waste.get('suggested')} instead of {waste.get('current')} "
                f"for the batch sizes seen)",
            )
        )
    warm = info.get("warmup")
    if warm:
        rows.append(
            (
                "warm-up",
                f"sizes 1..{len(warm['batch_sizes'])} in {warm['seconds'] * 1e3:.1f} ms; "
                f"missing {warm['missing'] or 'none'}",
            )
        )
    toggles = info.get("toggles") or {}
    if toggles:
        rows.append(("toggles", ", ".join(f"{k}={'on' if v else 'off'}" for k, v in toggles.items())))
    for k, v in rows:
        summary.add_row(k, str(v))
    console.print(summary)

    keys = Table(title="keys", title_justify="left")
    for col in (
        "key",
        "status",
        "pool MiB",
        "warm-up peak MiB",
        "capture ms",
        "replays",
        "eager",
        "padded rows",
        "note",
    ):
        keys.add_column(col, justify="right" if col not in ("key", "status", "note") else "left")
    for name, k in (info.get("keys") or {}).items():
        note = k.get("cause") or ""
        if k.get("status") == "refused":
            note = f"memory ({k.get('refusals')}x)"
        keys.add_row(
            name,
            k.get("status"),
            _mib(k.get("pool_bytes")),
            _mib(k.get("warmup_peak_bytes")),
            f"{k.get('capture_ms', 0):.1f}",
            str(k.get("replays")),
            str(k.get("eager_runs")),
            str(k.get("padded_rows")),
            note,
        )
    console.print(keys)
