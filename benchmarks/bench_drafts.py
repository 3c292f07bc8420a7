"""The draft kinds on one target: step time and accepted tokens per step.

The example model at the Qwen3-0.6B shape (28 layers, bf16). Per batch size, in one run, the device time
of a greedy step graph (``SpecDecoder.step_ms``: the key's replay on pad-filled buffers) of:

* the EAGLE head at K = 3, and plain decoding (K = 0);
* a DeepSeek-style MTP head at K = 3 (``build(draft="mtp")``);
* an EAGLE-3 head at K = 3 (``build(draft="eagle3")``: the target tapped at three layers, a draft
  vocabulary of 32000 target ids; target: <= 1.1x the EAGLE head's step);
* prompt lookup (``stepgraph.drafts.PromptLookupDraft``, n-grams 3..1) at K = 3;
* the target's forward over K + 1 and over 1 tokens, each its own graph: "K = 0 + verify" is the K = 0
  step plus their difference, what a step with a free draft would cost (target: prompt lookup <= 1.05x).

Then decoding of repetitive prompts (a phrase repeated) with prompt lookup at K = 3 against plain
decoding: accepted tokens per step and decode tokens/s. With random weights at this vocabulary the target's
greedy text rarely revisits its prompt's n-grams, so this mostly measures a lookup draft that misses; a
trained model copying from its context is what lookup is for.

    python benchmarks/bench_drafts.py --out benchmarks/results/<dir> [--layers 28] [--batches 1,8,32]
"""

from __future__ import annotations

import random

import torch
from _timing import (
    CUDA,
    add_smoke_flag,
    env_record,
    example_models,
    graph_of,
    median,
    parse_step_bench,
    save,
    step_bench_parser,
    sync,
)

from stepgraph.drafts import PromptLookupDraft
from stepgraph.examples.model import MtpHead
from stepgraph.speculative.decoder import SpecDecoder
from stepgraph.speculative.draft_policy import FixedDraftLength

K = 3


def forward_ms(target, batch: int, width: int, repeats: int = 20) -> float:
    """Device ms of one target forward over ``width`` tokens of ``batch`` rows (the scratch row), as a graph."""
    dev = target.device
    tokens = torch.ones((batch, width), dtype=torch.int64, device=dev)
    positions = torch.arange(width, device=dev).expand(batch, width) + 8
    rows = torch.full((batch,), target.cfg.scratch_row, device=dev)
    g = graph_of(lambda: target(tokens, positions, rows))
    if not CUDA:
        return float("nan")
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        end.record()
        sync()
        times.append(start.elapsed_time(end))
    return median(times)


def repetitive_prompts(batch: int, vocab: int) -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(1, vocab) for _ in range(rng.randint(4, 12))] * 6 for _ in range(batch)]


def decode(dec: SpecDecoder, prompts, tokens: int, draft_len: int) -> dict:
    dec.policy = FixedDraftLength(draft_len)
    dec.generate(prompts, max_new_tokens=8)  # first-use costs out of the figure
    dec.stats = type(dec.stats)()
    sync()
    out = dec.generate(prompts, max_new_tokens=tokens)
    sync()
    st = dec.stats
    return {"tok_s": sum(map(len, out)) / st.decode_seconds, "accept_len": st.mean_accept_len}


def main() -> None:
    ap = step_bench_parser(__doc__, tokens=128, batches="1,8,32", rounds=None)
    add_smoke_flag(ap)
    args, batches = parse_step_bench(ap, smoke_tokens=8)
    target, eagle = example_models(num_layers=args.layers, max_requests=max(batches))
    tapped, eagle3 = example_models(num_layers=args.layers, max_requests=max(batches), draft="eagle3")
    lookup = PromptLookupDraft.for_example(target)
    kinds = {
        "eagle": (target, eagle),
        "eagle3": (tapped, eagle3),
        "mtp": (target, MtpHead(target)),
        "prompt lookup": (target, lookup),
    }
    decs = {
        name: SpecDecoder.for_example(t, d, num_draft_tokens=(K, 0), max_batch=max(batches))
        for name, (t, d) in kinds.items()
    }
    env = env_record()
    record = {"env": env, "layers": args.layers, "K": K, "step_ms": {}, "decode": {}}
    rows = [
        f"# Draft kinds, {args.layers} layers, K = {K}, {env['date']}, {env['gpu']}, torch {env['torch']}, "
        f"triton {env['triton']}",
        "",
        "Device ms per greedy step graph:",
        "",
        "| B | K = 0 | K = 0 + verify | EAGLE head | EAGLE-3 head | EAGLE-3 / EAGLE | MTP head | prompt lookup | "
        "lookup / (K = 0 + verify) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for B in batches:
        plain = decs["eagle"].step_ms(B, 0)
        verify = plain + forward_ms(target, B, K + 1) - forward_ms(target, B, 1)
        ms = {"k0": plain, "k0_plus_verify": verify, **{n: d.step_ms(B, K) for n, d in decs.items()}}
        record["step_ms"][f"B={B}"] = ms
        lk, e1, e3, mtp = ms["prompt lookup"], ms["eagle"], ms["eagle3"], ms["mtp"]
        rows.append(
            f"| {B} | {plain:.3f} | {verify:.3f} | {e1:.3f} | {e3:.3f} | {e3 / e1:.3f}x | {mtp:.3f} | {lk:.3f} | "
            f"{lk / verify:.3f}x |"
        )
    rows += [
        "",
        f"Decoding repetitive prompts, {args.tokens} tokens each:",
        "",
        "| B | plain tok/s | lookup tok/s | speed-up | lookup accepted per step |",
        "| --- | --- | --- | --- | --- |",
    ]
    for B in batches:
        prompts = repetitive_prompts(B, target.cfg.vocab_size)
        plain = decode(decs["prompt lookup"], prompts, args.tokens, 0)
        lookup = decode(decs["prompt lookup"], prompts, args.tokens, K)
        record["decode"][f"B={B}"] = {"plain": plain, "lookup": lookup}
        rows.append(
            f"| {B} | {plain['tok_s']:.0f} | {lookup['tok_s']:.0f} | {lookup['tok_s'] / plain['tok_s']:.2f}x | "
            f"{lookup['accept_len']:.2f} |"
        )
    print("\n".join(rows))
    save(args.out, "drafts", record, "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
