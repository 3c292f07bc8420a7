"""Timing helpers shared by the benchmarks (CUDA events through triton.testing.do_bench, medians)."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import torch
import triton
from triton.testing import do_bench


def env_record() -> dict:
    return {
        "date": time.strftime("%Y-%m-%d"),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "none",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "cpu": host_cpu(),  # host-time figures differ by up to 2x between the machines' CPUs
    }


def host_cpu() -> str:
    """The host CPU's model name (Linux), else the platform's processor string."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def eager_us(fn, rep: int = 200) -> float:
    """Median microseconds of ``fn`` launched eagerly (includes launch overhead)."""
    return do_bench(fn, warmup=25, rep=rep, return_mode="median") * 1e3


def graph_of(fn, copies: int = 1) -> torch.cuda.CUDAGraph:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(copies):
            fn()
    torch.cuda.synchronize()
    return g


def per_instance_us(fn, copies: int = 20, rep: int = 200) -> float:
    """Median microseconds per instance with ``copies`` instances captured in one graph, replayed back to
    back (the graph launch is paid once per step in a step graph, so it is amortised here)."""
    g = graph_of(fn, copies)
    return do_bench(g.replay, warmup=25, rep=rep, return_mode="median") * 1e3 / copies


def save(out_dir: str | Path, name: str, record: dict, table: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(record, indent=2, default=str))
    (out / f"{name}.md").write_text(table)
    print(table)
