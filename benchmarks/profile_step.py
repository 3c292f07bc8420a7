"""Where a step's time goes: torch.profiler over the eager step and the step graph, on the example model.

For each mode, ``--steps`` synchronous steps (each one host read of the tokens, as in ``bench_step.py``)
are profiled with CPU and CUDA activity. Reported per mode:

* wall time per step, device busy time per step (union of kernel intervals) and idle time inside the
  step window: the host's share;
* device time by kernel category (GEMM, attention, cache gather/scatter, stepgraph's Triton kernels,
  other) and the ten kernels with the most device time;
* the host API calls with the most time per step (cudaGraphLaunch, the token copy, the wait);
* the ten longest device gaps, with the kernels either side.

    python benchmarks/profile_step.py --out benchmarks/results/<dir> [--layers 28] [--batch 1]
        [--sampling greedy|temperature|top_k|top_k_top_p|top_p] [--attention sdpa|triton] [--compile] [--no-eager]
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from _timing import CUDA, add_smoke_flag, env_record, save, smoke, sync
from bench_step import Setup, restore
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function

from stepgraph import CLASSES, SamplingParams, Toggles

SAMPLINGS = {c.name: c.example for c in CLASSES}  # --sampling: a class, and settings of that class

CATEGORIES = (  # first match wins; lower-case substrings of kernel names
    (
        "stepgraph triton",
        ("_greedy_verify", "_argmax_partial", "_tail_", "_row_copy", "_stats_kernel", "_round_kernel")
        + ("_kept_mass", "_finalize_kernel", "_temperature_kernel", "_relay", "_copy_in", "_mass_kernel")
        + ("_draw_kernel", "_bound_kernel", "_gather_kernel", "_cut_kernel"),
    ),
    ("attention", ("flash", "fmha", "attention", "attn", "sdpa", "efficient", "softmax")),
    ("inductor fused (compile=True)", ("triton_poi", "triton_red", "triton_per", "triton_tem")),
    ("cache gather/scatter", ("index", "gather", "scatter", "put_")),
    ("gemm", ("gemm", "cutlass", "xmma", "nvjet", "matmul", "sm90", "cublas", "_skinny_mm")),
    ("memcpy/memset", ("memcpy", "memset")),
)


def category(name: str) -> str:
    low = name.lower()
    for cat, marks in CATEGORIES:
        if any(m in low for m in marks):
            return cat
    return "other (elementwise, norms, rope)"


def union_us(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e <= end:
            continue
        total += e - max(s, end)
        end = e
    return total


def analyse(prof, steps: int) -> dict:
    events = prof.events()
    windows = sorted(
        (e.time_range.start, e.time_range.end) for e in events if e.name == "step" and e.device_type == DeviceType.CPU
    )
    kernels = sorted(  # device activity, without the "step" ranges that record_function mirrors on the GPU
        (
            e
            for e in events
            if e.device_type == DeviceType.CUDA
            and e.time_range.end > e.time_range.start
            and e.name != "step"
            and not getattr(e, "is_user_annotation", False)
        ),
        key=lambda e: e.time_range.start,
    )
    calls: dict[str, int] = defaultdict(int)
    by_kernel: dict[str, float] = defaultdict(float)
    by_cat: dict[str, float] = defaultdict(float)
    for k in kernels:
        d = k.time_range.end - k.time_range.start
        by_kernel[k.name] += d
        calls[k.name] += 1
        by_cat[category(k.name)] += d
    # device work belongs to the step window its launch fell in; a window spans launch to host read
    wall = sum(e - s for s, e in windows)
    busy = union_us([(k.time_range.start, k.time_range.end) for k in kernels])
    gaps = []
    for a, b in zip(kernels, kernels[1:], strict=False):
        g = b.time_range.start - a.time_range.end
        if g > 0:
            gaps.append((g, a.name, b.name))
    gaps.sort(reverse=True)
    host: dict[str, float] = defaultdict(float)
    for e in events:
        if e.device_type == DeviceType.CPU and e.name.startswith(("cuda", "cu")) and e.name != "cudaDeviceSynchronize":
            host[e.name] += e.time_range.end - e.time_range.start
    n = max(1, len(windows))
    top = sorted(by_kernel.items(), key=lambda kv: -kv[1])[:10]
    return {
        "steps": n,
        "wall_us_per_step": wall / n,
        "device_busy_us_per_step": busy / n,
        "idle_us_per_step": max(0.0, wall - busy) / n,
        "kernels_per_step": len(kernels) / n,
        "by_category_us_per_step": {c: v / n for c, v in sorted(by_cat.items(), key=lambda kv: -kv[1])},
        "top_kernels_us_per_step": [(name[:90], v / n) for name, v in top],
        "top_kernels_calls_per_step": [(name[:90], calls[name] / n) for name, _ in top],
        "memcpy_memset_calls_per_step": {k[:60]: c / n for k, c in calls.items() if category(k) == "memcpy/memset"},
        "host_api_us_per_step": {k: v / n for k, v in sorted(host.items(), key=lambda kv: -kv[1])[:8]},
        "largest_gaps_us": [(round(g, 1), a[:50], b[:50]) for g, a, b in gaps[:10]],
        "gaps_over_5us_per_step": sum(g for g, _, _ in gaps if g > 5) / n,
    }


def profile_mode(
    setup: Setup, name: str, toggles: Toggles, steps: int, params: SamplingParams, compile: bool = False
) -> dict:
    dec = setup.decoder(name, toggles, sampling=params, compile=compile)
    dec.step.run(dec.slots, params.sampling)  # captures the key when graphs are on
    runner = dec.step.runner
    B = setup.B

    def once():
        dec.read_tokens(runner.run(None, params.sampling, batch_size=B)["tokens"])

    restore(dec)
    for _ in range(min(5, steps)):
        once()
    sync()
    restore(dec)
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if CUDA else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        for _ in range(steps):
            with record_function("step"):
                once()
        sync()
    return analyse(prof, steps)


def table(name: str, r: dict) -> list[str]:
    rows = [
        f"## {name}",
        "",
        f"{r['steps']} steps: wall {r['wall_us_per_step']:.1f} us/step, device busy {r['device_busy_us_per_step']:.1f} "
        f"us/step, idle {r['idle_us_per_step']:.1f} us/step, {r['kernels_per_step']:.0f} kernels/step, "
        f"gaps over 5 us: {r['gaps_over_5us_per_step']:.1f} us/step.",
        "",
        "| device time by category | us / step | share |",
        "| --- | --- | --- |",
    ]
    busy = sum(r["by_category_us_per_step"].values()) or 1.0
    rows += [f"| {c} | {v:.1f} | {v / busy:.1%} |" for c, v in r["by_category_us_per_step"].items()]
    rows += ["", "| kernel | us / step | calls / step |", "| --- | --- | --- |"]
    rows += [
        f"| `{k}` | {v:.1f} | {c:.0f} |"
        for (k, v), (_, c) in zip(r["top_kernels_us_per_step"], r["top_kernels_calls_per_step"], strict=True)
    ]
    rows += [f"| `{k}` | - | {c:.1f} |" for k, c in r["memcpy_memset_calls_per_step"].items()]
    rows += ["", "| host API call | us / step |", "| --- | --- |"]
    rows += [f"| {k} | {v:.1f} |" for k, v in r["host_api_us_per_step"].items()]
    rows += ["", "| largest device gaps (us) | before | after |", "| --- | --- | --- |"]
    rows += [f"| {g} | `{a}` | `{b}` |" for g, a, b in r["largest_gaps_us"]]
    return rows + [""]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/latest")
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--attention", default="sdpa", choices=["sdpa", "triton"])
    ap.add_argument("--sampling", default="greedy", choices=list(SAMPLINGS))
    ap.add_argument("--matmul", default="torch", choices=["torch", "triton"])
    ap.add_argument("--compile", action="store_true", help="also the step graph with compile=True")
    ap.add_argument("--no-eager", action="store_true", help="skip the eager mode")
    add_smoke_flag(ap)
    args = ap.parse_args()
    params = SAMPLINGS[args.sampling]
    preset, prompt, cache = "qwen3-0.6b", 128, 1024
    if smoke(args):
        preset, prompt, cache, args.layers, args.steps = "tiny", 8, 128, 1, 2
    setup = Setup(
        args.batch,
        args.layers,
        max(args.batch, 8) + 1,
        prompt,
        cache,
        args.attention,
        matmul=args.matmul,
        preset=preset,
    )
    record = {"env": env_record(), "layers": args.layers, "batch": args.batch, "modes": {}}
    if not args.no_eager:
        record["modes"]["eager"] = profile_mode(setup, "eager", Toggles.all(False), args.steps, params)
    record["modes"]["step graph"] = profile_mode(setup, "graph", Toggles.all(True), args.steps, params)
    if args.compile:
        record["modes"]["step graph, compile=True"] = profile_mode(
            setup, "compiled", Toggles.all(True), args.steps, params, compile=True if CUDA else "eager"
        )
    env = record["env"]
    rows = [
        f"# Step profile, {env['date']}, {env['gpu']}, torch {env['torch']}, triton {env['triton']}",
        "",
        f"Example model at the Qwen3-0.6B shape ({args.layers} layers), bf16, K=3, B={args.batch}, "
        f"{args.attention} attention, {args.matmul} matmul, {args.sampling} sampling, torch.profiler.",
        "",
    ]
    for name, r in record["modes"].items():
        rows += table(name, r)
    suffix = (
        ("" if args.attention == "sdpa" else f"_{args.attention}")
        + ("" if args.sampling == "greedy" else f"_{args.sampling}")
        + ("" if args.matmul == "torch" else f"_mm_{args.matmul}")
        + ("_compile" if args.compile else "")
    )
    record["attention"] = args.attention
    save(args.out, f"profile_{args.layers}l_b{args.batch}{suffix}", record, "\n".join(rows))


if __name__ == "__main__":
    main()
