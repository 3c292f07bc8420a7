"""Cost of log-probabilities in the step: the time of a step (the median from one launch to the next) of the
example model's step graph (28 layers, K = 3) through ``SpecDecoder.generate``, without them against
``logprobs=0`` (each token's own) and ``logprobs=20`` (with the top 20 alternatives), greedy, at B = 1, 8
and 32, in one run, the settings taking turns; ``logprobs=20, torch`` is the same through the torch
reference (``STEPGRAPH_FUSED_LOGPROBS=0``). The ratio to the decoder without them is what matters (target
with top-20: <= 1.05x).

``--prompt``: the cost of ``prompt_logprobs`` instead. It times a forward of the chunked prefill (chunks of
256 positions, captured), without them against ``prompt_logprobs=0`` and ``prompt_logprobs=20``, for B
prompts of 512 tokens prefilled together.

    python benchmarks/bench_logprobs.py --out benchmarks/results/<dir> [--layers 28] [--tokens 96] [--prompt]
"""

from __future__ import annotations

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
    smoke,
    step_bench_parser,
)
from bench_sampling import step_ms

from stepgraph import RunnerConfig, SamplingParams, Toggles
from stepgraph.speculative.decoder import SpecDecoder

SETTINGS = {"none": None, "logprobs=0": 0, "logprobs=20": 20, "logprobs=20, torch": 20}
PROMPT_SETTINGS = {"none": None, "prompt_logprobs=0": 0, "prompt_logprobs=20": 20}
CHUNK, PROMPT_LEN = 256, 512


def prefill_ms(dec: SpecDecoder, batch: int, prompt_len: int) -> tuple[float, float]:
    """The median wall time of one chunk forward (the prefill's seconds over its forwards) and its median
    device time (CUDA events), in ms, for ``batch`` prompts of ``prompt_len`` tokens prefilled together."""
    prompts = [[(7 * i + j) % 1000 + 1 for j in range(prompt_len)] for i in range(batch)]
    dec.generate(prompts, max_new_tokens=1)  # every forward's key captured
    events, seconds = dec.scheduler.prefill_events, dec.stats.prefill_seconds
    events.clear()
    dec.record_step_events = True
    dec.generate(prompts, max_new_tokens=1)
    dec.record_step_events = False
    forwards = max(1, -(-batch * prompt_len // CHUNK))
    return (dec.stats.prefill_seconds - seconds) * 1e3 / forwards, median(elapsed_ms(events))


def prompt_main(args, batches) -> None:
    target, draft = example_models(num_layers=args.layers, max_requests=max(batches), max_seq_len=PROMPT_LEN + 64)
    prompt_len = PROMPT_LEN if not smoke(args) else 12
    decoders = {
        name: SpecDecoder.for_example(
            target, draft, num_draft_tokens=3, max_batch=max(batches), prefill_chunk=CHUNK, prompt_logprobs=n
        )
        for name, n in PROMPT_SETTINGS.items()
    }
    env = env_record()
    rows, figures = ratio_table(
        f"# Prompt log-probabilities in the chunked prefill, {args.layers} layers, chunks of {CHUNK}, prompts of "
        f"{prompt_len}, {env['date']}, {env['gpu']}, torch {env['torch']}, triton {env['triton']}",
        PROMPT_SETTINGS,
        batches,
        args.rounds,
        lambda n, B: prefill_ms(decoders[n], B, prompt_len),
        f"Median of {args.rounds} rounds; ratios are to the decoder without prompt log-probabilities in the same "
        "run. Wall: the prefill's time over its chunk forwards. Device: median CUDA-event time of one forward.",
    )
    record = {"env": env, "layers": args.layers, "prompt_len": prompt_len, "chunk": CHUNK, "ms": figures}
    print("\n".join(rows))
    save(args.out, "prompt_logprobs", record, "\n".join(rows) + "\n")


def ratio_table(title: str, names, batches, rounds: int, measure, footer: str) -> tuple[list[str], dict]:
    """A markdown table of ``measure(name, B) -> (wall ms, device ms)`` at each batch size, the settings
    ``names`` taking turns, with ratios to the first; returns its rows and the figures by ``"B=..."``."""
    base = next(iter(names))
    rows, figures = [title, "", "| B | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)], {}
    for B in batches:
        ms, dev = in_turns(names, rounds, lambda n, B=B: measure(n, B))
        figures[f"B={B}"] = {"wall": ms, "device": dev}
        rows.append(f"| {B} | " + " | ".join(ratio_cells(ms, dev, base)) + " |")
    return [*rows, "", footer], figures


def main() -> None:
    ap = step_bench_parser(__doc__, batches="1,8,32")
    ap.add_argument("--prompt", action="store_true", help="time prompt_logprobs in the chunked prefill instead")
    add_smoke_flag(ap)
    args, batches = parse_step_bench(ap)
    if args.prompt:
        return prompt_main(args, batches)
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
    env = env_record()
    rows, figures = ratio_table(
        f"# Log-probabilities in the step, {args.layers} layers, K = 3, greedy, {env['date']}, {env['gpu']}, "
        f"torch {env['torch']}, triton {env['triton']}",
        SETTINGS,
        batches,
        args.rounds,
        lambda n, B: step_ms(decoders[n], B, SamplingParams(), args.tokens, 1),
        f"Median of {args.rounds} rounds; ratios are to the decoder without log-probabilities in the same run. "
        "Wall: median time from one step's launch to the next's. Device: median CUDA-event time of one step.",
    )
    record = {"env": env, "layers": args.layers, "tokens": args.tokens, "ms_per_step": figures}
    print("\n".join(rows))
    save(args.out, "logprobs", record, "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
