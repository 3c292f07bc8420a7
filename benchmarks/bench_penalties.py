"""Cost of penalties in the step: the time of a step (the median from one launch to the next) of the example
model's step graph (28 layers, K = 3) through ``SpecDecoder.generate``, a decoder without penalties
against one built with ``penalties=True``, serving requests without penalties, with a repetition penalty
(1.05, as Qwen2.5-Instruct ships), with all three, with ``no_repeat_ngram_size=3`` (the kernel's
n-gram scan over each request's tokens), with a logit bias of 300 tokens and 32 bad words of 1-4 tokens
(the kernel's bias and word passes), and with ``allowed_token_ids`` of 2000 tokens (a pass over the
vocabulary for every row, the draft's too), greedy and sampled (the ``top_k`` class), at B = 1, 8, 32 and
64, in one run, the settings taking turns. The ratio to the decoder without penalties at the same
sampling is what matters (target: <= 1.03x). The tables are saved after every row, so a run stopped by a
time limit keeps the rows it finished.

    python benchmarks/bench_penalties.py --out benchmarks/results/<dir> [--layers 28] [--tokens 96]
        [--classes greedy,top_k]
"""

from __future__ import annotations

import dataclasses

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

from stepgraph import SamplingParams
from stepgraph.speculative.decoder import SpecDecoder

#: name -> (decoder with penalties, the requests' penalties)
SETTINGS = {  # "on, none set": the keys without penalties, which such a batch runs
    "off": (False, {}),
    "on, none set": (True, {}),
    "repetition 1.05": (True, {"repetition_penalty": 1.05}),
    "all three": (True, {"repetition_penalty": 1.05, "presence_penalty": 0.5, "frequency_penalty": 0.3}),
    "no-repeat 3-grams": (True, {"no_repeat_ngram_size": 3}),
}
BIAS_AND_WORDS = "bias 300 + 32 bad words"  # a setting of bias_and_words(the vocabulary's size)


ALLOWED = "allowed 2000 tokens"  # a setting of allowed_tokens(the vocabulary's size)


def allowed_tokens(vocab_size: int) -> dict:
    """``allowed_token_ids`` of 2000 tokens spread over the vocabulary."""
    return {"allowed_token_ids": range(0, vocab_size, max(1, vocab_size // 2000))[:2000]}


def bias_and_words(vocab_size: int) -> dict:
    """A logit bias of 300 tokens and 32 bad words of 1-4 tokens, spread over the vocabulary."""
    spread = vocab_size // 400
    return {
        "logit_bias": {t * spread: (-1.0) ** t * 2.0 for t in range(300)},
        "bad_words_ids": [[(w * 7 + j) * spread + 1 for j in range(w % 4 + 1)] for w in range(32)],
    }


CLASSES = {"greedy": SamplingParams(), "top_k": SamplingParams(temperature=0.8, top_k=40, top_p=0.9)}


def main() -> None:
    ap = step_bench_parser(__doc__)
    ap.add_argument("--classes", default=",".join(CLASSES), help=f"some of {', '.join(CLASSES)}")
    add_smoke_flag(ap)
    args, batches = parse_step_bench(ap)
    names = args.classes.split(",")
    if not set(names) <= set(CLASSES):
        ap.error(f"--classes takes some of {', '.join(CLASSES)}, comma-separated; got {args.classes!r}")
    classes = {name: CLASSES[name] for name in names}
    target, draft = example_models(num_layers=args.layers, max_requests=max(batches))
    V = target.cfg.vocab_size
    settings = {**SETTINGS, BIAS_AND_WORDS: (True, bias_and_words(V)), ALLOWED: (True, allowed_tokens(V))}
    decoders = {
        on: SpecDecoder.for_example(target, draft, num_draft_tokens=3, max_batch=max(batches), penalties=on)
        for on in (False, True)
    }
    record = {"env": env_record(), "layers": args.layers, "tokens": args.tokens, "ms_per_step": {}}
    env = record["env"]
    rows = [
        f"# Penalties in the step, {args.layers} layers, K = 3, {env['date']}, {env['gpu']}, "
        f"torch {env['torch']}, triton {env['triton']}",
        "",
        "| class | B | " + " | ".join(settings) + " |",
        "| --- | --- |" + " --- |" * len(settings),
    ]
    footer = [
        "",
        f"Median of {args.rounds} rounds; ratios are to the decoder without penalties at the same sampling in the "
        "same run. Wall: median time from one step's launch to the next's. Device: median CUDA-event time of one step.",
    ]
    for cls, base in classes.items():
        for B in batches:

            def measure(name, B=B, base=base):
                on, penalties = settings[name]
                return step_ms(decoders[on], B, dataclasses.replace(base, **penalties), args.tokens, 1)

            ms, dev = in_turns(settings, args.rounds, measure)
            record["ms_per_step"][f"{cls}/B={B}"] = {"wall": ms, "device": dev}
            rows.append(f"| {cls} | {B} | " + " | ".join(ratio_cells(ms, dev, "off")) + " |")
            save(args.out, "penalties", record, "\n".join(rows + footer) + "\n", echo=False)
    print("\n".join(rows + footer))


if __name__ == "__main__":
    main()
