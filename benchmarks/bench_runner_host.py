"""Host time of ``StepGraphRunner.run()`` when the batch brings new inputs (the copy-in path).

A runner with eight buffers of mixed dtypes (int64, int32, float32, bool, bf16 rows of 1024, ...) and a
trivial step, its key captured. In one run, the host time of one call (the device idle before it, so
nothing waits), and the wall and device time per call of calls back to back, for:

* a bare ``CUDAGraph.replay()`` of the key's graph;
* ``run(batch_size=3)``: inputs already in the buffers (the steady state);
* ``run({k new inputs})`` for k = 1, 3, 8, on the device and on the host (pinned and pageable);
* ``ChainStep``-style slot lists: ``run({"slots": torch.tensor(list)})`` and ``run({"slots": list})``.

Target: up to 8 new inputs cost <= 15 us of host time above ``run(batch_size=...)`` (goal <= 8 us).

    python benchmarks/bench_runner_host.py --out benchmarks/results/<dir>
"""

from __future__ import annotations

import argparse
import time

import torch
from _timing import CUDA, DEVICE, add_smoke_flag, env_record, save, smoke, sync

from stepgraph import Buffer, RunnerConfig, Sampling, StepGraphRunner, Toggles

B, MAXB = 3, 64
BUFFERS = {
    "tokens": Buffer((MAXB,), torch.int64, pad=0),
    "positions": Buffer((MAXB,), torch.int64, pad=0),
    "hidden": Buffer((MAXB, 1024), torch.bfloat16, pad=0.0),
    "slots": Buffer((MAXB,), torch.int64, pad=-1),
    "lengths": Buffer((MAXB,), torch.int32, pad=0),
    "temperature": Buffer((MAXB,), torch.float32, pad=0.0),
    "mask": Buffer((MAXB,), torch.bool, pad=False),
    "top_k": Buffer((MAXB,), torch.int64, pad=0),
}


def step(buf, bs, sampling):
    return {"out": buf["hidden"][:, :8].float().sum(-1) + buf["tokens"] + buf["slots"]}


def host_samples(fn, calls: int) -> list[float]:
    """Host microseconds of each of ``calls`` calls, the device idle before each (nothing to wait for:
    this is the host's own cost)."""
    times = []
    for _ in range(calls):
        sync()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    sync()
    return times


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2]


ROUNDS = {"rounds": 20, "calls": 20, "warm": 50, "loop": 400}  # a smoke run takes a few of each


def host_us_interleaved(cases: dict, steady: str) -> tuple[dict, dict]:
    """Every case's median host time over ``rounds`` rounds of ``calls`` calls, the cases taking turns
    within each round, and its median over the rounds of (its round median - ``steady``'s round median):
    a moment when the host runs slower hits every case alike instead of one row."""
    rounds, calls = ROUNDS["rounds"], ROUNDS["calls"]
    for fn in cases.values():
        for _ in range(ROUNDS["warm"]):
            fn()
    samples = {n: [] for n in cases}
    above = {n: [] for n in cases}
    for _ in range(rounds):
        medians = {}
        for n, fn in cases.items():
            got = host_samples(fn, calls)
            samples[n] += got
            medians[n] = median(got)
        for n in cases:
            above[n].append(medians[n] - medians[steady])
    return {n: median(v) for n, v in samples.items()}, {n: median(v) for n, v in above.items()}


def loop_us(fn) -> tuple[float, float]:
    """(wall, device) microseconds per call of calls back to back (the larger one bounds; no device time
    on the CPU)."""
    calls = ROUNDS["loop"]
    if not CUDA:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t0) / calls * 1e6, float("nan")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6, start.elapsed_time(end) * 1e3 / calls


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/latest")
    add_smoke_flag(ap)
    args = ap.parse_args()
    if smoke(args):
        ROUNDS.update(rounds=2, calls=2, warm=1, loop=2)
    runner = StepGraphRunner(
        step, BUFFERS, device=DEVICE, config=RunnerConfig(toggles=Toggles.all(True), buckets=(4, 8, 64), progress=False)
    )
    names = list(BUFFERS)
    dev = {n: torch.zeros((B, *BUFFERS[n].shape[1:]), dtype=BUFFERS[n].dtype, device=DEVICE) for n in names}
    pinned = {n: t.cpu().pin_memory() if CUDA else t.cpu() for n, t in dev.items()}
    pageable = {n: t.cpu() for n, t in dev.items()}
    runner.run(dev, Sampling.GREEDY)  # captures bs=4/greedy
    captured = runner.stats(runner.key_for(B)).captured
    cases = {"bare CUDAGraph.replay()": captured.graph.replay} if captured is not None else {}
    cases["run(batch_size=3)"] = lambda: runner.run(batch_size=B)
    for k in (1, 3, 8):
        for where, src in (("device", dev), ("host pinned", pinned), ("host pageable", pageable)):
            chosen = {n: src[n] for n in names[:k]}
            cases[f"run({k} new {where} inputs)"] = lambda c=chosen: runner.run(c)
    slot_list = [5, 2, 9]
    cases["run(slots: torch.tensor(list))"] = lambda: runner.run({"slots": torch.tensor(slot_list)})
    cases["run(slots: the list itself)"] = lambda: runner.run({"slots": slot_list})
    host, above_steady = host_us_interleaved(cases, "run(batch_size=3)")
    results = {name: (host[name], *loop_us(fn)) for name, fn in cases.items()}
    above = {n: a for n, a in above_steady.items() if n.startswith("run(") and "batch_size" not in n}
    worst = max(a for n, a in above.items() if "8 new" in n)
    record = {
        **env_record(),
        "batch": B,
        "results": {
            n: {"host_us": h, "loop_wall_us": w, "loop_device_us": d, "above_steady_us": above.get(n)}
            for n, (h, w, d) in results.items()
        },
        "worst_8_inputs_above_steady_us": worst,
    }
    lines = [
        f"# run() host time with new inputs ({record['gpu']}, torch {record['torch']}, triton {record['triton']}, "
        f"{record['date']}; host CPU {record['cpu']})",
        "",
        "Host time of one call with the device idle before it (median of 400: 20 rounds of 20 calls, the",
        "cases taking turns in each round; 'above' is the median over rounds of the case's round median",
        "minus the steady state's), and per call of 400 calls back to back (wall and device time: the larger",
        "one bounds such a loop).",
        "",
        "| call | host µs | above run(batch_size=3) | back to back: wall µs | device µs |",
        "| --- | --- | --- | --- | --- |",
    ]
    for n, (h, w, d) in results.items():
        a = above.get(n)
        lines.append(f"| {n} | {h:.1f} | {'-' if a is None else f'{a:+.1f}'} | {w:.1f} | {d:.1f} |")
    lines += ["", f"Worst of 8 new inputs above the steady state: {worst:.1f} µs (target <= 15, goal <= 8)."]
    save(args.out, "runner_host", record, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
