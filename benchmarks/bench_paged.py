"""The paged KV cache against the row cache on the example model, in one run.

* **step**: the device time of one step graph (K = 3, prompts of 256 tokens, the Qwen3-0.6B shape) at
  B = 1, 8 and 32 for the row cache with the Triton decode attention, the paged cache (pages of 16, the
  Triton paged attention) and the row cache with SDPA. Targets: paged <= 1.05x rows (Triton) at each B;
  paged at B = 32 <= 5.0 ms, and <= 1.2x its B = 1 step (the goal).
* **capacity**: the serving trace of ``bench_serving.py`` (prompts 32-512, outputs 16-256, mixed sampling)
  with every request arriving at once, in the KV memory of 64 rows x 1024 positions: the row cache (64
  requests at most) against the paged cache (4096 pages of 16 and up to 256 requests; the overlapped loop
  in both; every key captured first). Reported: requests in a step (mean, while some still wait for
  room, and the peak), tokens/s (and without the prefills, which run alone and eagerly in both), steps,
  request-steps sat out for pages.
  Target: >= 3x as many requests at once paged, and more tokens/s.
* **schedule**: the paged attention kernel alone (20 in one graph; the Qwen3-0.6B attention, K + 1 = 4
  query tokens, pages of 16, 4096 positions per request at most) on its fixed split against the split
  planned on the host from the lengths (:mod:`stepgraph.kernels.split_plan`), for uniform and mixed
  lengths; and the host time of one plan (the ``before_replay`` hook). The step part also runs the paged
  cache on the planned schedule.

    python benchmarks/bench_paged.py --out benchmarks/results/<dir> [--layers 28] [--requests 256]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from _timing import add_smoke_flag, env_record, example_models, per_instance_us, save, smoke, sync
from bench_serving import SHAPE, trace

from stepgraph import RunnerConfig
from stepgraph.examples.model import PRESETS
from stepgraph.keys import DEFAULT_BUCKETS
from stepgraph.sampling import Sampling
from stepgraph.speculative.decoder import SpecDecoder

K, ROWS, ROW_LEN, PAGE = 3, 64, 1024, 16
PROMPT = {"length": 256}  # a smoke run's are short
CONFIGS = {  # name -> example model overrides
    "rows, triton": {"kv": "rows", "attention": "triton"},
    "paged, triton": {"kv": "paged", "attention": "triton", "page_size": PAGE},
    "paged, triton, planned": {"kv": "paged", "attention": "triton", "page_size": PAGE, "kv_schedule": "planned"},
    "rows, sdpa": {"kv": "rows", "attention": "sdpa"},
}
SCHEDULE_CASES = {  # name -> lengths (positions each request reads)
    "B=1, 3000": [3000],
    "B=8, 512 each": [512] * 8,
    "B=8, 64..4000": [64, 4000, 300, 1200, 90, 2500, 700, 150],
    "B=32, 512 each": [512] * 32,
    "B=32, one of 4000 and 31 of 128": [4000] + [128] * 31,
    "B=64, 200..1000": [200 + (i * 131) % 800 for i in range(64)],
}


def step_ms(dec: SpecDecoder, b: int, steps: int) -> float:
    """Device time of the step graph of a resident batch of ``b`` (pages for every position it reaches)."""
    g = torch.Generator().manual_seed(b)
    prompts = [torch.randint(0, dec.vocab_size, (PROMPT["length"],), generator=g).tolist() for _ in range(b)]
    requests = dec.make_requests(prompts, max_new_tokens=(steps + 2) * (K + 1))
    slots = dec.admit(requests).tolist()
    dec.kv.reserve([(r.cache_row, dec.slots.worst(r)) for r in requests])
    inputs = dec.kv.step_inputs([r.cache_row for r in requests], True, dec.step.kv_buffers)
    dec.read_tokens(dec.step.run(slots, Sampling.GREEDY, kv_inputs=inputs)["tokens"])  # captures the key
    ms = dec.device_step_ms(b, steps) if torch.cuda.is_available() else float("nan")
    dec.finish(requests)
    return ms


def schedule(smoke_run: bool) -> dict:
    """Fixed against planned split for each of SCHEDULE_CASES: microseconds per kernel in a graph, and the
    host microseconds of one plan."""
    from stepgraph.kernels.decode_attention import paged_attention, planned_paged_attention
    from stepgraph.kv.split_plan import SplitPlan

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    H, KVH, hd, T, S = (16, 8, 128, 4, 4096) if not smoke_run else (4, 2, 16, 2, 256)
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    out = {}
    for name, lengths in SCHEDULE_CASES.items():
        lengths = [min(n, S) for n in lengths]
        B, n = len(lengths), S // PAGE
        g = torch.Generator(device=dev).manual_seed(B)
        pages = torch.randn(B * n + 1, 2, KVH, PAGE, hd, device=dev, dtype=dtype, generator=g)
        table = torch.randperm(B * n, device=dev, generator=g).to(torch.int32).view(B, n)
        rows = torch.arange(B, device=dev)
        last = torch.tensor(lengths, device=dev)[:, None] - 1
        positions = (last - T + 1 + torch.arange(T, device=dev)).clamp(min=0)
        q = torch.randn(B, T, H, hd, device=dev, dtype=dtype, generator=g)
        plan = SplitPlan(B, KVH, dev)
        plan.update(lengths)
        fixed_us = per_instance_us(lambda: paged_attention(q, pages, table, rows, positions, hd**-0.5))
        planned_us = per_instance_us(
            lambda: planned_paged_attention(q, pages, table, rows, positions, hd**-0.5, plan.plan, plan.items)
        )
        reps, grown = 200, [lengths, [n + PAGE for n in lengths]]  # a new plan each time, as pages come
        t0 = time.perf_counter()
        for i in range(reps):
            plan.update(grown[i % 2])
        host_us = (time.perf_counter() - t0) / reps * 1e6
        out[name] = {"fixed_us": fixed_us, "planned_us": planned_us, "ratio": planned_us / fixed_us,
                     "plan_host_us": host_us}  # fmt: skip
        print(name, out[name], flush=True)
    return out


def capacity(layers: int, kv: str, work: dict, smoke_run: bool) -> dict:
    """The trace served once untimed (captures) and once timed; the batch of every step recorded."""
    rows = ROWS if kv == "rows" else 4 * ROWS
    overrides = {"kv": kv, "attention": "triton", "max_requests": rows, "max_seq_len": ROW_LEN}
    if kv == "paged":
        overrides.update(page_size=PAGE, num_pages=ROWS * ROW_LEN // PAGE)
    if smoke_run:
        overrides.update(attention="sdpa", max_requests=rows // 16, num_pages=ROWS * 256 // PAGE // 16)
    target, draft = example_models(num_layers=layers, **overrides)
    buckets = tuple(b for b in (*DEFAULT_BUCKETS, 96, 128, 192, 256) if b <= target.cfg.max_requests)
    cfg = RunnerConfig(buckets=buckets, progress=False)
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=K, max_batch=target.cfg.max_requests, config=cfg)
    dec.warmup(sampling=("greedy", "temperature", "top_k_top_p"))  # no capture inside a timed pass
    batches: list[tuple[int, bool]] = []  # per step: (requests in it, whether some request still waited)
    started: set[int] = set()
    n = len(work["prompts"])
    for _ in range(2):  # untimed, then timed
        batches.clear()
        started.clear()
        dec.stats = type(dec.stats)()
        sync()
        t0 = time.perf_counter()
        out = dec.generate(
            work["prompts"], max_new_tokens=work["max_new_tokens"], sampling=work["sampling"], overlap=True,
            on_step=lambda b: batches.append((b, len(started) < n)), on_tokens=lambda i, t: started.add(i),
        )  # fmt: skip
        sync()
        seconds = time.perf_counter() - t0
    tokens = sum(map(len, out))
    decode = seconds - dec.stats.prefill_seconds
    return {
        "kv": dec.kv.info(),
        "requests_per_step_mean": statistics.fmean(b for b, _ in batches),
        "requests_per_step_while_waiting": statistics.fmean([b for b, w in batches if w] or [0]),
        "requests_per_step_max": max(b for b, _ in batches),
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "decode_tokens_per_s": tokens / decode,
        "steps": dec.stats.steps,
        "stalled_request_steps": dec.stats.stalled,
        "prefill_seconds": dec.stats.prefill_seconds,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/latest")
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--steps", type=int, default=50, help="replays per step time")
    ap.add_argument("--only", choices=["step", "capacity", "schedule"], help="one part only")
    add_smoke_flag(ap)
    args = ap.parse_args()
    smoke_run = smoke(args)
    batches = (1, 8, 32)
    if smoke_run:
        args.requests, args.steps, batches = 8, 2, (1, 2)
        PROMPT["length"] = 16
        SHAPE.update(prompts=(4, 12), outputs=(2, 8))
    record = {**env_record(), "layers": args.layers, "k": K, "prompt": PROMPT["length"], "page_size": PAGE}
    if args.only in (None, "step"):
        step: dict[str, dict[int, float]] = {}
        for name, overrides in CONFIGS.items():
            if smoke_run:
                overrides = {**overrides, "attention": "sdpa"}
            target, draft = example_models(num_layers=args.layers, max_requests=max(batches), **overrides)
            dec = SpecDecoder.for_example(target, draft, num_draft_tokens=K, config=RunnerConfig(progress=False))
            step[name] = {b: step_ms(dec, b, args.steps) for b in batches}
            print(name, step[name], flush=True)
            del dec, target, draft
            torch.cuda.empty_cache() if torch.cuda.is_available() else None
        record["step_ms"] = step
        paged, rows = step["paged, triton"], step["rows, triton"]
        record["paged_over_rows"] = {b: paged[b] / rows[b] for b in batches}
        record["paged_b_last_over_b1"] = paged[batches[-1]] / paged[1]
        record["planned_over_fixed"] = {b: step["paged, triton, planned"][b] / paged[b] for b in batches}
    if args.only in (None, "schedule") and torch.cuda.is_available():  # the Triton kernels themselves
        record["schedule"] = schedule(smoke_run)
    if args.only in (None, "capacity"):
        vocab = PRESETS["tiny" if smoke_run else "qwen3-0.6b"].vocab_size
        work = trace(args.requests, 1.0, False, vocab)
        record["capacity"] = {kv: capacity(args.layers, kv, work, smoke_run) for kv in ("rows", "paged")}
        rows_c, paged_c = record["capacity"]["rows"], record["capacity"]["paged"]
        for name in ("requests_per_step_mean", "requests_per_step_while_waiting", "requests_per_step_max",
                     "tokens_per_s", "decode_tokens_per_s"):  # fmt: skip
            record[f"{name}_ratio"] = paged_c[name] / rows_c[name]
    save(args.out, "paged", record, table(record))


def table(rec: dict) -> str:
    lines = [f"# Paged KV cache vs row cache ({rec['gpu']}, {rec['layers']} layers, K = {rec['k']})", ""]
    if "step_ms" in rec:
        batches = list(next(iter(rec["step_ms"].values())))
        lines += [
            "## Step device time (ms), prompts of 256",
            "",
            "| cache | " + " | ".join(f"B={b}" for b in batches) + " |",
        ]
        lines.append("|---" * (len(batches) + 1) + "|")
        for name, by_b in rec["step_ms"].items():
            lines.append(f"| {name} | " + " | ".join(f"{by_b[b]:.3f}" for b in batches) + " |")
        ratios = ", ".join(f"B={b} {r:.3f}x" for b, r in rec["paged_over_rows"].items())
        lines += ["", f"paged / rows (Triton): {ratios} (target <= 1.05x)"]
        lines.append(f"paged B={batches[-1]} / B=1: {rec['paged_b_last_over_b1']:.2f}x (goal <= 1.2x)")
        ratios = ", ".join(f"B={b} {r:.3f}x" for b, r in rec["planned_over_fixed"].items())
        lines.append(f"paged, planned / fixed schedule: {ratios}")
    if "schedule" in rec:
        lines += [
            "",
            "## Paged attention alone: fixed split against the host-planned split (us per kernel in a graph)",
            "",
            "| lengths | fixed | planned | planned / fixed | plan on the host (us) |",
            "|---|---|---|---|---|",
        ]
        for name, c in rec["schedule"].items():
            lines.append(
                f"| {name} | {c['fixed_us']:.1f} | {c['planned_us']:.1f} | {c['ratio']:.3f} | {c['plan_host_us']:.1f} |"
            )
    if "capacity" in rec:
        lines += ["", "## Capacity: the serving trace, all at once, KV memory of 64 x 1024 positions", ""]
        lines += [
            "| cache | requests per step: mean / while some wait / max | tokens/s (decode only) | steps | sat out |",
            "|---|---|---|---|---|",
        ]
        for kv, c in rec["capacity"].items():
            lines.append(
                f"| {kv} | {c['requests_per_step_mean']:.1f} / {c['requests_per_step_while_waiting']:.1f} / "
                f"{c['requests_per_step_max']} | {c['tokens_per_s']:.0f} ({c['decode_tokens_per_s']:.0f}) | "
                f"{c['steps']} | {c['stalled_request_steps']} |"
            )
        r = {k.removesuffix("_ratio"): v for k, v in rec.items() if k.endswith("_ratio")}
        lines += [
            "",
            f"paged / rows: requests per step {r['requests_per_step_mean']:.2f}x mean, "
            f"{r['requests_per_step_while_waiting']:.2f}x while requests wait, {r['requests_per_step_max']:.2f}x at "
            f"the peak (target >= 3x); tokens/s {r['tokens_per_s']:.2f}x ({r['decode_tokens_per_s']:.2f}x decode only)",
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
