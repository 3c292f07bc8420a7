"""Continuous batching on the example model: requests arrive, join, finish and leave.

64 requests (prompts of 32-512 tokens, outputs of 16-256 tokens, seeded) with mixed sampling (half
greedy, a quarter temperature 0.8, a quarter temperature 0.8 + top-k 50 + top-p 0.9), max batch 16,
arriving all at once or over time (seeded Poisson arrivals, ``--rate`` requests per second). Modes:
eager, step graph (synchronous loop), step graph with the overlapped loop. Each mode runs the trace once
untimed (first-use captures and compiles) and once timed. Reported per run: tokens/s, per-step p50/p99
(host time between steps), steps whose batch changed, occupancy (the device's busy time in steps and
prefills over the run's wall time while requests were in the system: the loop's sleeps until the next
arrival, with nothing to run, are left out, and reported as idle time), captured keys, eager
runs and capture failures.

The batching target: the same trace all greedy, where the mean step time of the step graph (synchronous
loop, and overlapped loop; idle waits for arrivals and prefills not counted) is compared with fixed-batch
step times weighted by how often each batch size ran: <= 1.03x. The fixed batch (a resident batch of each
size seen) is stepped back to back through the synchronous loop's own body (the scheduler's launch, the
tokens read and applied to the requests), so the ratio is what requests joining and leaving cost; the
ratio against the bare launch and read (no tokens applied, no step events) is reported beside it. And
the overlapped loop keeps >= 99% occupancy while the batch changes.

    python benchmarks/bench_serving.py --out benchmarks/results/<dir> [--layers 28] [--requests 64]
    python benchmarks/bench_serving.py --plot benchmarks/results/<dir>/serving.json   # the plot, anywhere
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import torch
from _timing import add_smoke_flag, elapsed_ms, env_record, example_models, save, smoke, sync

from stepgraph import RunnerConfig, SamplingParams, Toggles
from stepgraph.sampling import Sampling
from stepgraph.speculative.decoder import SpecDecoder

K, MAX_BATCH = 3, 16
SHAPE = {"prompts": (32, 512), "outputs": (16, 256), "fixed_steps": 30}  # a smoke run's are short
SAMPLING = {
    "greedy": SamplingParams(),
    "temperature": SamplingParams(temperature=0.8),
    "top_k_top_p": SamplingParams(temperature=0.8, top_k=50, top_p=0.9),
}


def trace(n: int, rate: float, poisson: bool, vocab: int, seed: int = 0, greedy_only: bool = False) -> dict:
    g = torch.Generator().manual_seed(seed)
    (p_lo, p_hi), (o_lo, o_hi) = SHAPE["prompts"], SHAPE["outputs"]
    lengths = torch.randint(p_lo, p_hi + 1, (n,), generator=g).tolist()
    prompts = [torch.randint(0, vocab, (m,), generator=g).tolist() for m in lengths]
    outputs = torch.randint(o_lo, o_hi + 1, (n,), generator=g).tolist()
    kinds = ["greedy", "greedy", "temperature", "top_k_top_p"]
    sampling = [SAMPLING["greedy" if greedy_only else kinds[i % 4]] for i in range(n)]
    gaps = torch.empty(n).exponential_(rate, generator=g) if poisson else torch.zeros(n)
    arrivals = torch.cumsum(gaps, 0).tolist()
    return {"prompts": prompts, "max_new_tokens": outputs, "sampling": sampling, "arrivals": arrivals}


def serve(dec: SpecDecoder, work: dict, overlap: bool) -> dict:
    """One timed pass of ``work``; per-step host times from the step callback, device time from events."""
    marks: list[float] = []
    batches: list[int] = []

    def on_step(batch: int) -> None:
        marks.append(time.perf_counter())
        batches.append(batch)

    before = dec.info()
    dec.stats = type(dec.stats)()
    dec.step_events.clear()
    dec.scheduler.prefill_events.clear()
    sync()
    t0 = time.perf_counter()
    out = dec.generate(
        work["prompts"],
        max_new_tokens=work["max_new_tokens"],
        sampling=work["sampling"],
        arrivals=work["arrivals"],
        overlap=overlap,
        on_step=on_step,
    )
    sync()
    wall = time.perf_counter() - t0
    st = dec.stats
    step_busy = sum(elapsed_ms(dec.step_events)) / 1e3
    prefill_busy = sum(elapsed_ms(dec.scheduler.prefill_events)) / 1e3
    gaps = sorted(b - a for a, b in zip(marks, marks[1:]))
    info = dec.info()
    tokens = sum(len(o) for o in out)
    return {
        "tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "steps": st.steps,
        "mean_batch": sum(batches) / max(1, len(batches)),
        "batch_histogram": dict(sorted(Counter(batches).items())),
        "batch_changes": st.batch_changes,
        "mean_step_ms": st.decode_seconds / max(1, st.steps) * 1e3,
        "step_p50_ms": gaps[len(gaps) // 2] * 1e3 if gaps else None,
        "step_p99_ms": gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))] * 1e3 if gaps else None,
        # the device's busy share of the whole run: steps and prefills (the batch changes as requests join)
        "occupancy": (step_busy + prefill_busy) / (wall - st.idle_seconds) if dec.step_events else None,
        "occupancy_of_wall": (step_busy + prefill_busy) / wall if dec.step_events else None,  # idle included
        "idle_s": st.idle_seconds,
        "step_device_ms": step_busy / max(1, st.steps) * 1e3,
        "prefill_s": st.prefill_seconds,
        "decode_s": st.decode_seconds,
        "mean_accept_len": st.mean_accept_len,
        "captured_keys": len(info["captured_keys"]),
        "eager_runs": info["eager_runs"] - before["eager_runs"],
        "capture_failures": info["capture_failures"] - before["capture_failures"],
        "outputs": out,
    }


def fixed_loop_ms(dec: SpecDecoder, prompts: list[list[int]], b: int) -> float:
    """Synchronous greedy step time of a resident batch of ``b`` requests through the synchronous loop's
    body (the scheduler's launch, with its step events when the trace records them; the tokens read and
    applied to the requests), the batch held fixed: a trace's step when nobody joins or leaves."""
    steps = SHAPE["fixed_steps"]
    sched = dec.scheduler
    requests = dec.make_requests(prompts[:b], max_new_tokens=(steps + 2) * (K + 1))  # none finishes by length
    dec.admit(requests)

    def step() -> None:
        sched.consume(requests, sched.read_tokens(sched.launch(requests)["tokens"]))

    step()  # the batch's slot list goes in (and its key is captured if needed)
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    ms = (time.perf_counter() - t0) / steps * 1e3
    dec.finish(requests)
    return ms


def fixed_batch_ms(dec: SpecDecoder, prompts: list[list[int]], b: int) -> float:
    """Synchronous greedy step time of a resident batch of ``b`` requests (the same loop body: launch, read
    the tokens), stepped back to back."""
    steps = SHAPE["fixed_steps"]
    requests = dec.make_requests(prompts[:b], max_new_tokens=8)
    slots = dec.admit(requests)
    saved = {n: f.clone() for n, f in dec.step.relay.fields.items()}
    dec.read_tokens(dec.step.run(slots, Sampling.GREEDY)["tokens"])  # captures the key if needed
    for n, f in dec.step.relay.fields.items():
        f.copy_(saved[n])
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        dec.read_tokens(dec.step.run(None, Sampling.GREEDY, batch_size=b)["tokens"])
    ms = (time.perf_counter() - t0) / steps * 1e3
    for n, f in dec.step.relay.fields.items():
        f.copy_(saved[n])
    dec.finish(requests)
    return ms


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/latest")
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--rate", type=float, default=40.0, help="Poisson arrivals per second")
    ap.add_argument("--plot", help="only draw the plot of a saved serving.json")
    ap.add_argument("--preset", default="qwen3-0.6b", help="example model shape")
    ap.add_argument("--prefill-chunk", type=int, help="prompt positions prefilled between steps (default: whole)")
    ap.add_argument("--no-eager", action="store_true", help="leave the eager mode out")
    add_smoke_flag(ap)
    args = ap.parse_args()
    if args.plot:
        plot(Path(args.plot))
        return
    if smoke(args):
        args.requests, args.rate = 6, 400.0
        SHAPE.update(prompts=(4, 12), outputs=(2, 8), fixed_steps=2)
    target, draft = example_models(args.preset, num_layers=args.layers, max_requests=MAX_BATCH + 2, max_seq_len=1024)
    vocab = target.cfg.vocab_size
    modes = {"eager": (False, False), "step graph": (True, False), "step graph + overlap": (True, True)}
    if args.no_eager:
        del modes["eager"]
    record = {**env_record(), "layers": args.layers, "requests": args.requests, "rate": args.rate, "runs": {},
              "prefill_chunk": args.prefill_chunk}  # fmt: skip
    decoders = {}
    for mode, (graphs, _) in modes.items():
        toggles = Toggles.all(True) if graphs else Toggles(step_graph=False)
        cfg = RunnerConfig(toggles=toggles, progress=False)
        decoders[mode] = SpecDecoder.for_example(
            target, draft, num_draft_tokens=K, max_batch=MAX_BATCH, config=cfg, prefill_chunk=args.prefill_chunk
        )
        if graphs:
            decoders[mode].warmup(MAX_BATCH)
        decoders[mode].record_step_events = True
    for arrival in ("all at once", "poisson"):
        work = trace(args.requests, args.rate, arrival == "poisson", vocab)
        for mode, (_, overlap) in modes.items():
            dec = decoders[mode]
            serve(dec, work, overlap)  # untimed: first-use captures, compiles, pinned buffers
            run = serve(dec, work, overlap)
            record["runs"][f"{mode}, {arrival}"] = run
            print(f"{mode}, {arrival}: {run['tokens_per_s']:.0f} tok/s, {run['steps']} steps", flush=True)
    # the batching target: an all-greedy trace against fixed-batch steps at the batch sizes it ran, with the
    # synchronous loop and with the overlapped one (whose host work runs while the device steps)
    greedy = trace(args.requests, args.rate, True, vocab, greedy_only=True)
    fixed: dict[int, float] = {}  # launch + read tokens
    loop: dict[int, float] = {}  # the synchronous loop's body
    for name, mode, overlap in (("greedy_batching", "step graph", False),
                                ("greedy_batching_overlap", "step graph + overlap", True)):  # fmt: skip
        dec = decoders[mode]
        serve(dec, greedy, overlap)
        run = serve(dec, greedy, overlap)
        for b in run["batch_histogram"]:
            if b not in fixed:
                fixed[b] = fixed_batch_ms(decoders["step graph"], greedy["prompts"], b)
                loop[b] = fixed_loop_ms(decoders["step graph"], greedy["prompts"], b)
        hist = run["batch_histogram"]
        expected = sum(loop[b] * n for b, n in hist.items()) / sum(hist.values())
        bare = sum(fixed[b] * n for b, n in hist.items()) / sum(hist.values())
        record[name] = {**run, "fixed_loop_ms": {b: loop[b] for b in hist}, "expected_mean_step_ms": expected,
                        "ratio": run["mean_step_ms"] / expected, "fixed_batch_ms": {b: fixed[b] for b in hist},
                        "expected_launch_read_ms": bare, "ratio_launch_read": run["mean_step_ms"] / bare}  # fmt: skip
    for r in (*record["runs"].values(), record["greedy_batching"], record["greedy_batching_overlap"]):
        r.pop("outputs")
    save(args.out, "serving", record, table(record))
    try:
        plot(Path(args.out) / "serving.json")
    except ImportError:
        print("matplotlib is not installed here: draw the plot with --plot elsewhere")


def table(rec: dict) -> str:
    lines = [
        f"# Continuous batching ({rec['gpu']}, torch {rec['torch']}, triton {rec['triton']}, {rec['date']})",
        "",
        f"Example model, Qwen3-0.6B shape, {rec['layers']} layers, bf16, K = {K}, max batch {MAX_BATCH}; "
        f"{rec['requests']} requests (prompts 32-512, outputs 16-256 tokens; half greedy, a quarter temperature, "
        f"a quarter top-k/top-p), all at once or Poisson arrivals at {rec['rate']:g}/s; prefill "
        + (f"in chunks of {rec['prefill_chunk']} positions between steps." if rec.get("prefill_chunk") else "whole."),
        "",
        "| mode, arrivals | tokens/s | steps | mean batch | batch changed | step p50 / p99 ms (p99/p50) | occupancy | "
        "keys captured | eager runs | capture failures |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in rec["runs"].items():
        occ = f"{r['occupancy'] * 100:.2f}%" if r["occupancy"] is not None and "eager" not in name else "-"
        p50 = "-"
        if r["step_p50_ms"] is not None:
            p50 = f"{r['step_p50_ms']:.2f} / {r['step_p99_ms']:.2f} ({r['step_p99_ms'] / r['step_p50_ms']:.2f}x)"
        lines.append(
            f"| {name} | {r['tokens_per_s']:.0f} | {r['steps']} | {r['mean_batch']:.1f} | {r['batch_changes']} | "
            f"{p50} | {occ} | {r['captured_keys']} | {r['eager_runs']} | "
            f"{r['capture_failures']} |"
        )
    lines.append("")
    for name, loop in (("greedy_batching", "synchronous loop"), ("greedy_batching_overlap", "overlapped loop")):
        gb = rec.get(name)
        if gb is None:
            continue
        occ = ""
        if gb.get("occupancy") is not None:
            occ = f", occupancy {gb['occupancy'] * 100:.2f}% ({gb['occupancy_of_wall'] * 100:.2f}% of the wall time"
            occ += f" with its {gb['idle_s'] * 1e3:.0f} ms idle before arrivals)"
        lines.append(
            f"All-greedy Poisson trace, step graph, {loop}: mean step {gb['mean_step_ms']:.3f} ms over "
            f"{gb['steps']} steps (mean batch {gb['mean_batch']:.1f}, {gb['batch_changes']} batch changes{occ}) "
            f"against {gb['expected_mean_step_ms']:.3f} ms for fixed batches of the same sizes through the "
            f"synchronous loop's body (resident): **{gb['ratio']:.3f}x** (target <= 1.03x); against the bare "
            f"launch and read, {gb['expected_launch_read_ms']:.3f} ms: {gb['ratio_launch_read']:.3f}x.\n"
        )
    return "\n".join(lines) + "\n"


def plot(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rec = json.loads(path.read_text())
    names = list(rec["runs"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    axes[0].barh(names, [rec["runs"][n]["tokens_per_s"] for n in names], color="tab:blue")
    axes[0].set_xlabel("tokens / s")
    axes[0].set_title("throughput")
    gb = rec["greedy_batching"]
    sizes = sorted(int(b) for b in gb["fixed_batch_ms"])
    axes[1].plot(sizes, [gb["fixed_batch_ms"][str(b)] for b in sizes], "o-", label="fixed batch: launch + read")
    if "fixed_loop_ms" in gb:  # records since the loop's own body became the reference
        axes[1].plot(sizes, [gb["fixed_loop_ms"][str(b)] for b in sizes], "s-", label="fixed batch: the loop's body")
    axes[1].axhline(
        gb["mean_step_ms"], color="tab:red", ls="--", label=f"continuous batching mean ({gb['ratio']:.3f}x)"
    )
    axes[1].axhline(gb["expected_mean_step_ms"], color="tab:green", ls=":", label="fixed batches, same mix")
    axes[1].set_xlabel("batch size")
    axes[1].set_ylabel("ms per step")
    axes[1].set_title("greedy: step time")
    axes[1].legend(fontsize=8)
    fig.suptitle(f"continuous batching, {rec['layers']} layers, {rec['gpu']}")
    fig.tight_layout()
    fig.savefig(path.with_suffix(".png"), dpi=110)
    print(f"saved {path.with_suffix('.png')}")


if __name__ == "__main__":
    main()
