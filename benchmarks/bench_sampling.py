"""Whole-step cost of sampling: decode time per step of the example model's step graph (28 layers,
K = 3) through ``SpecDecoder.generate``, greedy against temperature and temperature + top-k + top-p (and
min-p), at B = 1 and 8, in one run. The ratio to greedy is what matters (target: <= 1.03x).

    python benchmarks/bench_sampling.py --out benchmarks/results/<dir> [--layers 28] [--tokens 96]
"""

from __future__ import annotations

import argparse

from _timing import add_smoke_flag, elapsed_ms, env_record, example_models, median, save, smoke

from stepgraph import SamplingParams
from stepgraph.speculative.decoder import SpecDecoder

SETTINGS = {
    "greedy": SamplingParams(),
    "temperature 0.8": SamplingParams(temperature=0.8),
    "top-k 50 + top-p 0.9": SamplingParams(temperature=0.8, top_k=50, top_p=0.9),
    "min-p 0.1": SamplingParams(temperature=0.8, min_p=0.1),
}


def step_ms(dec: SpecDecoder, batch: int, sampling: SamplingParams, tokens: int, repeats: int) -> tuple[float, float]:
    """Medians over ``repeats`` generate() calls of decode seconds per step and of the device time of a
    step (CUDA events around each step), in ms."""
    prompts = [[(7 * i + j) % 1000 + 1 for j in range(32)] for i in range(batch)]
    # as a server starts: every batch size's key captured before serving (sampled requests finish at
    # different steps, so the batch passes through smaller sizes, whose first-use captures are not steps)
    dec.warmup(batch, sampling.sampling)
    dec.generate(prompts, max_new_tokens=8, sampling=sampling)
    times, device = [], []
    for _ in range(repeats):
        dec.stats = type(dec.stats)()
        dec.record_step_events, dec.step_events[:] = True, []
        dec.generate(prompts, max_new_tokens=tokens, sampling=sampling)
        dec.record_step_events = False
        times.append(dec.stats.decode_seconds / max(dec.stats.steps, 1) * 1e3)
        device.append(median(elapsed_ms(dec.step_events)))
    return median(times), median(device)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="benchmarks/results/latest")
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=3)
    add_smoke_flag(ap)
    args = ap.parse_args()
    batches = (1, 8)
    if smoke(args):
        args.tokens, args.repeats, batches = 4, 1, (1, 2)
    target, draft = example_models(num_layers=args.layers, max_requests=8)
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, max_batch=8)
    record = {"env": env_record(), "layers": args.layers, "tokens": args.tokens, "ms_per_step": {}}
    env = record["env"]
    rows = [
        f"# Sampled steps vs greedy steps, {args.layers} layers, K = 3, {env['date']}, {env['gpu']}, "
        f"torch {env['torch']}, triton {env['triton']}",
        "",
    ]
    rows += ["| B | " + " | ".join(SETTINGS) + " |", "| --- |" + " --- |" * len(SETTINGS)]
    record["device_ms_per_step"] = {}
    for B in batches:
        both = {name: step_ms(dec, B, sp, args.tokens, args.repeats) for name, sp in SETTINGS.items()}
        ms = {name: t for name, (t, _) in both.items()}
        dev = {name: d for name, (_, d) in both.items()}
        record["ms_per_step"][f"B={B}"], record["device_ms_per_step"][f"B={B}"] = ms, dev
        cells = [f"{t:.3f} ms ({t / ms['greedy']:.3f}x; device {dev[n]:.3f})" for n, t in ms.items()]
        rows.append(f"| {B} | " + " | ".join(cells) + " |")
    keys = dec.info()["keys"]
    record["keys"] = keys
    eager = {k: v.get("eager_runs") for k, v in (keys.items() if isinstance(keys, dict) else []) if v.get("eager_runs")}
    rows += [
        "",
        "Ratios are to the greedy step in the same run; target for top-k + top-p: <= 1.03x. Device: median "
        "CUDA-event time of one step (the step graph's replay and what the loop launches around it).",
        f"Keys that ran eagerly: {eager or 'none'}.",
    ]
    print("\n".join(rows))
    save(args.out, "sampling", record, "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
