"""Whole-step cost of sampling: the time of a step of the example model's step graph (28 layers, K = 3)
through ``SpecDecoder.generate``, greedy against each sampling class chat traffic brings
(temperature; top-k + top-p; top-p alone, as Llama 3's generation config; min-p alone; a large top-k, alone and
with top-p; requests taking turns between top-k + top-p and top-p alone, as clients of one server send them), at
B = 1, 8, 32 and 64, in one run, the settings taking turns. The ratio to greedy is what matters (target:
<= 1.03x). A step that captured a key while timed is reported (warm-up covers every bucket).

    python benchmarks/bench_sampling.py --out benchmarks/results/<dir> [--layers 28] [--tokens 96] [--batches 1,8]
        [--settings "top-p 0.9,mix"]
"""

from __future__ import annotations

import itertools
from time import perf_counter as perf

from _timing import (
    add_smoke_flag,
    elapsed_ms,
    env_record,
    example_models,
    in_turns,
    median,
    parse_step_bench,
    ratio_cells,
    save,
    step_bench_parser,
)

from stepgraph import Sampling, SamplingParams
from stepgraph.speculative.decoder import SpecDecoder

SETTINGS = {
    "greedy": SamplingParams(),
    "temperature 0.8": SamplingParams(temperature=0.8),
    "top-k 50 + top-p 0.9": SamplingParams(temperature=0.8, top_k=50, top_p=0.9),
    "top-p 0.9": SamplingParams(temperature=0.6, top_p=0.9),
    "min-p 0.1": SamplingParams(temperature=0.8, min_p=0.1),
    "top-k 1000": SamplingParams(temperature=0.8, top_k=1000),
    "top-k 2000 + top-p 0.9": SamplingParams(temperature=0.8, top_k=2000, top_p=0.9),
    "mix": (SamplingParams(temperature=0.8, top_k=50, top_p=0.9), SamplingParams(temperature=0.6, top_p=0.9)),
}

#: keys captured inside a timed generate() (should stay 0: warm-up captures every bucket first)
CAPTURED_WHILE_TIMED: list[str] = []


def step_ms(
    dec: SpecDecoder, batch: int, setting: SamplingParams | tuple[SamplingParams, ...], tokens: int, repeats: int
) -> tuple[float, float]:
    """Medians over ``repeats`` generate() calls of the wall time of a step (from one step's launch to the
    next's) and of its device time (CUDA events around each step), in ms; a tuple of settings is taken in
    turns by the requests. Medians over a call's steps,
    not means: sampled requests accept different numbers of tokens, so they finish at different steps
    where greedy ones finish together, and a mean lets the steps where the batch changes weigh on the
    sampled settings alone."""
    prompts = [[(7 * i + j) % 1000 + 1 for j in range(32)] for i in range(batch)]
    turns = setting if isinstance(setting, tuple) else (setting,)
    sampling = [turns[i % len(turns)] for i in range(batch)]
    # as a server starts: every batch size's key captured before serving (sampled requests finish at
    # different steps, so the batch passes through smaller sizes, whose first-use captures are not steps)
    dec.warmup(batch, Sampling.most_general(p.sampling for p in sampling))
    dec.generate(prompts, max_new_tokens=8, sampling=sampling)
    captured = set(dec.info()["captured_keys"])
    times, device = [], []
    for _ in range(repeats):
        launches: list[float] = []
        dec.record_step_events, dec.step_events[:] = True, []
        dec.generate(prompts, max_new_tokens=tokens, sampling=sampling, on_step=lambda _: launches.append(perf()))
        dec.record_step_events = False
        times.append(median([(b - a) * 1e3 for a, b in itertools.pairwise(launches)]))
        device.append(median(elapsed_ms(dec.step_events)))
    CAPTURED_WHILE_TIMED.extend(sorted(set(dec.info()["captured_keys"]) - captured))
    return median(times), median(device)


def main() -> None:
    ap = step_bench_parser(__doc__)
    ap.add_argument(
        "--settings",
        default=",".join(SETTINGS),
        help="comma-separated settings to time beside greedy (default: every one): " + ", ".join(SETTINGS),
    )
    add_smoke_flag(ap)
    args, batches = parse_step_bench(ap)
    unknown = [n for n in args.settings.split(",") if n not in SETTINGS]
    if unknown:
        ap.error(f"--settings: unknown {', '.join(unknown)}; use names from: {', '.join(SETTINGS)}")
    settings = {n: v for n, v in SETTINGS.items() if n == "greedy" or n in args.settings.split(",")}
    target, draft = example_models(num_layers=args.layers, max_requests=max(batches))
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, max_batch=max(batches))
    record = {"env": env_record(), "layers": args.layers, "tokens": args.tokens, "ms_per_step": {}}
    env = record["env"]
    rows = [
        f"# Sampled steps vs greedy steps, {args.layers} layers, K = 3, {env['date']}, {env['gpu']}, "
        f"torch {env['torch']}, triton {env['triton']}",
        "",
        "| B | " + " | ".join(settings) + " |",
        "| --- |" + " --- |" * len(settings),
    ]
    for B in batches:
        ms, dev = in_turns(settings, args.rounds, lambda name, B=B: step_ms(dec, B, settings[name], args.tokens, 1))
        record["ms_per_step"][f"B={B}"] = {"wall": ms, "device": dev}
        rows.append(f"| {B} | " + " | ".join(ratio_cells(ms, dev, "greedy")) + " |")
        print(rows[-1], flush=True)  # a run cut short still shows the batches it finished
    keys = dec.info()["keys"]
    record["keys"], record["captured_while_timed"] = keys, CAPTURED_WHILE_TIMED
    eager = {k: v.get("eager_runs") for k, v in (keys.items() if isinstance(keys, dict) else []) if v.get("eager_runs")}
    rows += [
        "",
        f"Median of {args.rounds} rounds; ratios are to the greedy step in the same run; target: <= 1.03x. Wall: "
        "median time from one step's launch to the next's. Device: median CUDA-event time of one step (the step "
        "graph's replay and what the loop launches around it).",
        f"Keys that ran eagerly: {eager or 'none'}. Keys captured while timed: {CAPTURED_WHILE_TIMED or 'none'}.",
    ]
    print("\n".join(rows))
    save(args.out, "sampling", record, "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
