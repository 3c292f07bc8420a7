"""Timing helpers shared by the benchmarks (CUDA events through triton.testing.do_bench, medians).

Every benchmark also runs on a machine without a GPU, with ``--smoke``: tiny shapes and few repeats, the
step graph's modes eager, so the test suite runs each script and none can rot. Those figures measure
nothing; the helpers here time the same calls on the CPU with the wall clock.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
import triton
from triton.testing import do_bench

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
SMOKE = {"on": False}  # set by smoke(): every timing helper then makes one call of what it times


def add_smoke_flag(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="tiny shapes and one call per figure, on the CPU where there is no GPU: checks that every mode "
        "runs (the figures mean nothing)",
    )


def step_bench_parser(
    doc: str | None, *, tokens: int = 96, batches: str = "1,8,32,64", rounds: int | None = 3
) -> argparse.ArgumentParser:
    """The arguments every step benchmark of the example model takes: ``--out``, ``--layers``, ``--tokens``,
    ``--batches`` (comma-separated) and ``--rounds`` (unless ``rounds`` is None); the script adds
    ``--smoke`` (:func:`add_smoke_flag`) and reads them with :func:`parse_step_bench`."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="benchmarks/results/latest")
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--tokens", type=int, default=tokens)
    ap.add_argument("--batches", default=batches)
    if rounds is not None:
        ap.add_argument("--rounds", type=int, default=rounds)
    return ap


def parse_step_bench(
    ap: argparse.ArgumentParser, *, smoke_tokens: int = 4
) -> tuple[argparse.Namespace, tuple[int, ...]]:
    """The arguments of :func:`step_bench_parser` and the batch sizes; a smoke run gets ``smoke_tokens``
    tokens, one round and batch sizes 1 and 2."""
    args = ap.parse_args()
    sizes = tuple(int(b) for b in args.batches.split(","))
    if smoke(args):
        args.tokens, sizes = smoke_tokens, (1, 2)
        if hasattr(args, "rounds"):
            args.rounds = 1
    return args, sizes


def smoke(args: argparse.Namespace) -> bool:
    """Whether this is a ``--smoke`` run (and if so, the timing helpers make one call per figure)."""
    SMOKE["on"] = bool(getattr(args, "smoke", False))
    return SMOKE["on"]


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def example_models(preset: str = "qwen3-0.6b", **overrides):
    """The example target and draft on this machine's device (bf16 on a GPU); in a smoke run the tiny
    preset with one layer (``overrides`` that shape the model are dropped then)."""
    from stepgraph.examples.model import build

    if SMOKE["on"]:
        shape = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "vocab_size", "max_seq_len")
        preset, overrides = "tiny", {k: v for k, v in overrides.items() if k not in shape}
        overrides["num_layers"] = 1
    return build(preset, device=DEVICE, dtype=torch.bfloat16 if CUDA else torch.float32, **overrides)


def elapsed_ms(events) -> list[float]:
    """Milliseconds between each (start, end) CUDA event pair (none recorded on the CPU: an empty list)."""
    sync()
    return [a.elapsed_time(b) for a, b in events]


def median(xs, default: float = float("nan")) -> float:
    return statistics.median(xs) if xs else default


def in_turns(names, rounds: int, measure) -> tuple[dict[str, float], dict[str, float]]:
    """Medians per setting of ``measure(name) -> (wall ms, device ms)`` over ``rounds`` rounds in which the
    settings ``names`` take turns (drift lands on all of them alike)."""
    wall: dict[str, list[float]] = {name: [] for name in names}
    device: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        for name in names:
            w, d = measure(name)
            wall[name].append(w)
            device[name].append(d)
    return {n: median(v) for n, v in wall.items()}, {n: median(v) for n, v in device.items()}


def ratio_cells(ms: dict[str, float], dev: dict[str, float], base: str) -> list[str]:
    """Table cells ``wall (ratio to base; device)`` for each setting."""
    return [f"{ms[n]:.3f} ms ({ms[n] / ms[base]:.3f}x; device {dev[n]:.3f})" for n in ms]


def _wall_us(fn, reps: int = 3) -> float:
    if SMOKE["on"]:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6
    fn()  # first-call costs out of the figure
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


class _EagerGraph:
    """A stand-in for a captured graph on the CPU: a replay runs the calls again."""

    def __init__(self, fn, copies: int) -> None:
        self.fn, self.copies = fn, copies

    def replay(self) -> None:
        for _ in range(self.copies):
            self.fn()


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
    if not CUDA:
        return _wall_us(fn)
    return do_bench(fn, warmup=25, rep=rep, return_mode="median") * 1e3


def graph_of(fn, copies: int = 1):
    """``copies`` calls of ``fn`` captured in one CUDA graph (on the CPU: replayed as calls)."""
    if not CUDA:
        return _EagerGraph(fn, copies)
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
    if SMOKE["on"]:
        copies = 1
    g = graph_of(fn, copies)
    if not CUDA:
        return _wall_us(g.replay) / copies
    return do_bench(g.replay, warmup=25, rep=rep, return_mode="median") * 1e3 / copies


def save(out_dir: str | Path, name: str, record: dict, table: str, echo: bool = True) -> None:
    """``name.json`` (the record) and ``name.md`` (the table) under ``out_dir``; the table printed too
    unless ``echo`` is off."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(record, indent=2, default=str))
    (out / f"{name}.md").write_text(table)
    if echo:
        print(table)
