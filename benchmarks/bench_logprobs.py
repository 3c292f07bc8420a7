"""Cost of log-probabilities in the step: the time of a step (the median from one launch to the next) of the
example model's step graph (28 layers, K = 3) through ``SpecDecoder.generate``, without them against
``logprobs=0`` (each token's own) and ``logprobs=20`` (with the top 20 alternatives), greedy, at B = 1, 8
and 32, in one run, the settings taking turns; ``logprobs=20, torch`` is the same through the torch
reference (``STEPGRAPH_FUSED_LOGPROBS=0``). The ratio to the decoder without them is what matters (target
with top-20: <= 1.05x).

    python benchmarks/bench_logprobs.py --out benchmarks/results/<dir> [--layers 28] [--tokens 96]
"""

from __future__ import annotations

from _timing import (
    add_smoke_flag,
    env_record,
    example_models,
    in_turns,
    parse_step_bench,
    ratio_cells,
    save,
    step_bench_parser,
)
from bench_sampling import step_ms

from stepgraph import RunnerConfig, SamplingParams, Toggles
from stepgraph.speculative.decoder import SpecDecoder

SETTINGS = {"none": None, "logprobs=0": 0, "logprobs=20": 20, "logprobs=20, torch": 20}


def main() -> None:
    ap = step_bench_parser(__doc__, batches="1,8,32")
    add_smoke_flag(ap)
    args, batches = parse_step_bench(ap)
    target, draft = example_models(num_layers=args.layers, max_requests=max(batches))
    torch_path = RunnerConfig(toggles=Toggles.from_env().with_piece("fused_logprobs", False))
    decoders = {
        name: SpecDecoder.for_example(
            target,
            draft,
            num_draft_tokens=3,
            max_batch=max(batches),
            logprobs=n,
            config=torch_path if name.endswith("torch") else None,
        )
        for name, n in SETTINGS.items()
    }
    record = {"env": env_record(), "layers": args.layers, "tokens": args.tokens, "ms_per_step": {}}
    env = record["env"]
    rows = [
        f"# Log-probabilities in the step, {args.layers} layers, K = 3, greedy, {env['date']}, {env['gpu']}, "
        f"torch {env['torch']}, triton {env['triton']}",
        "",
        "| B | " + " | ".join(SETTINGS) + " |",
        "| --- |" + " --- |" * len(SETTINGS),
    ]
    for B in batches:
        ms, dev = in_turns(SETTINGS, args.rounds, lambda n: step_ms(decoders[n], B, SamplingParams(), args.tokens, 1))
        record["ms_per_step"][f"B={B}"] = {"wall": ms, "device": dev}
        rows.append(f"| {B} | " + " | ".join(ratio_cells(ms, dev, "none")) + " |")
    rows += [
        "",
        f"Median of {args.rounds} rounds; ratios are to the decoder without log-probabilities in the same run. "
        "Wall: median time from one step's launch to the next's. Device: median CUDA-event time of one step.",
    ]
    print("\n".join(rows))
    save(args.out, "logprobs", record, "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
