"""Fused model inside the step graph: torch.compile's kernels captured into stepgraph's one graph.

The example model at the Qwen3-0.6B shape (28 layers, bf16, K = 3, EAGLE head), per attention (``sdpa``:
gather the cache rows and run masked SDPA over the whole cache; ``triton``: decode attention reading the
rows in place) and batch size, all in one run:

* the step graph over the model's eager kernels, and with ``compile=True`` (inductor's kernels, no CUDA
  graphs of torch's own): synchronous step, device time (back-to-back replays), capture ms and compile s;
* ``--matmul torch,triton``: the layers' projections through cuBLAS or stepgraph's skinny matmul kernel;
* the memory floor of the step: the weights it must read (the target once over K + 1 tokens, the draft
  head and the LM head K times) at 4.3 TB/s;
* ``torch.compile(mode="reduce-overhead")`` on the eager step of the same model (batch 1;
  ``--no-reduce-overhead`` skips it);
* greedy agreement with the target's own greedy decoding (uncompiled, one token per forward), for the
  step graph with and without compile;
* the warm-up of keys 1..8 with compile (compile and capture seconds).

    python benchmarks/bench_compile.py --out benchmarks/results/<dir> [--batches 1,8,32] [--attention sdpa,triton]
    python benchmarks/bench_compile.py --plot benchmarks/results/<dir>/compile_28l.json   # redraw the plot
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from _timing import CUDA, add_smoke_flag, env_record, example_models, save, smoke
from bench_step import GRAPH_TIMING, PROMPT, K, Setup, mode_compile, mode_step_graph

from stepgraph import RunnerConfig
from stepgraph.examples.model import greedy_reference
from stepgraph.speculative.decoder import SpecDecoder

HBM_BYTES_PER_S = 4.3e12
MODES = [("eager kernels", False), ("compiled", True)]  # a smoke run compiles with the eager backend


def floor_ms(target, draft) -> float:
    """Weights a step reads once each, at the H200's bandwidth: the target (embedding rows aside) over its
    K + 1 tokens once, the draft head's layer, fc, norm and the shared LM head in each of its K forwards."""
    nbytes = lambda ts: sum(t.numel() * t.element_size() for t in ts)  # noqa: E731
    target_w = [t for name, t in target.weights().items() if name != "embed"]
    draft_w = [draft.fc, draft.norm, target.lm_head, *draft.stack.layers[0].tensors().values()]
    return (nbytes(target_w) + K * nbytes(draft_w)) / HBM_BYTES_PER_S * 1e3


def agreement(models, compile: bool, prompts: list[list[int]], new_tokens: int) -> float:
    """Mean fraction of each request's tokens equal to the target's own greedy decoding, up to the first
    difference (near-ties in random bf16 weights make decodings part early)."""
    target, draft = models
    dec = SpecDecoder.for_example(
        target, draft, max_batch=len(prompts), compile=compile, config=RunnerConfig(progress=False)
    )
    outs = dec.generate(prompts, max_new_tokens=new_tokens)
    fractions = []
    for p, out in zip(prompts, outs):
        ref = greedy_reference(target, p, new_tokens)
        same = next((i for i, (a, b) in enumerate(zip(out, ref)) if a != b), len(ref))
        fractions.append(same / len(ref))
    dec.runner.release()
    return sum(fractions) / len(fractions)


def warmup_keys(models) -> dict:
    """Warm-up of keys 1..8 (greedy) with compile, as in a new process (torch's in-memory compile caches
    reset; its on-disk caches stay warm): total seconds, compile and capture per key."""
    torch._dynamo.reset()
    target, draft = models
    dec = SpecDecoder.for_example(target, draft, max_batch=8, compile=MODES[1][1], config=RunnerConfig(progress=False))
    t0 = time.perf_counter()
    report = dec.warmup(8)
    seconds = time.perf_counter() - t0
    keys = dec.info()["keys"]
    out = {
        "seconds": seconds,
        "captured": report.captured_keys,
        "compile_s": {k: v["compile_s"] for k, v in keys.items()},
        "capture_ms": {k: v["capture_ms"] for k, v in keys.items()},
        "compile": dec.info()["compile"],
    }
    dec.runner.release()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/latest")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--attention", default="sdpa,triton")
    ap.add_argument("--matmul", default="torch", help="torch,triton: the layers' projections (skinny_matmul)")
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--no-reduce-overhead", action="store_true")
    ap.add_argument("--no-agreement", action="store_true")
    ap.add_argument("--no-warmup", action="store_true")
    ap.add_argument("--plot", help="redraw the plot from a saved JSON record and exit")
    add_smoke_flag(ap)
    args = ap.parse_args()
    prompt = PROMPT
    if smoke(args):
        GRAPH_TIMING.update(steps=2, repeats=1)
        MODES[1] = ("compiled", "eager")
        args.batches, args.attention, prompt = "1", "sdpa", 8
    if args.plot:
        _plot(json.loads(Path(args.plot).read_text()), str(Path(args.plot).parent), Path(args.plot).stem)
        return
    batches = [int(b) for b in args.batches.split(",")]
    name = (
        f"compile_{args.layers}l"
        + ("" if args.attention == "sdpa,triton" else "_" + args.attention.replace(",", "_"))
        + ("" if args.matmul == "torch" else "_mm_" + args.matmul.replace(",", "_"))
    )
    record = {"env": env_record(), "layers": args.layers, "K": K, "prompt_len": PROMPT, "results": {}}
    rows = [
        "| attention | B | kernels | step graph (ms) | device (ms) | device / floor | compiled vs eager kernels (device) "
        "| capture (ms) | compile (s) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    g = torch.Generator().manual_seed(1)
    variants = [(a, m) for a in args.attention.split(",") for m in args.matmul.split(",")]
    for attention, matmul in variants:
        models = example_models(
            num_layers=args.layers,
            max_requests=max(*batches, 8) + 1,  # the decoders serve up to max(B, 8)
            attention=attention,
            matmul=matmul,
        )
        vocab = models[0].cfg.vocab_size
        lengths = (6, 9) if smoke(args) else (12, 40, 77, 128)
        prompts = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths]
        floor = floor_ms(*models)
        variant = attention if matmul == "torch" else f"{attention}, {matmul} matmul"
        per = record["results"][variant] = {"floor_ms": floor, "batches": {}}
        for B in batches:
            setup = Setup(B, args.layers, max(*batches, 8) + 1, prompt, attention=attention, models=models)
            res = {}
            for label, compile in MODES:
                t0 = time.perf_counter()
                sync, device, capture = mode_step_graph(setup, f"{label}", compile=compile)
                comp = setup.decoders[label].dec.info().get("compile", {})
                res[label] = {
                    "step_ms": sync,
                    "device_ms": device,
                    "capture_ms": capture,
                    "compile_s": sum(c["seconds"] for c in comp.values()),
                    "compile_failures": sum(c["failures"] for c in comp.values()),
                    "setup_s": time.perf_counter() - t0,
                }
            speedup = res["eager kernels"]["device_ms"] / res["compiled"]["device_ms"]
            for label, _ in MODES:
                r = res[label]
                rows.append(
                    f"| {variant} | {B} | {label} | {r['step_ms']:.3f} | {r['device_ms']:.3f} | "
                    f"{r['device_ms'] / floor:.2f}x | {speedup:.2f}x | {r['capture_ms']:.1f} | {r['compile_s']:.1f} |"
                )
            if B == 1 and not args.no_reduce_overhead:
                res["reduce_overhead"] = mode_compile(setup)
            per["batches"][B] = res
            print(rows[-2], rows[-1], sep="\n", flush=True)
            del setup
        save(args.out, name, record, _table(record, rows))  # a run cut short keeps its rows
        if not args.no_agreement:
            per["agreement"] = {label: agreement(models, c, prompts, 4 if smoke(args) else 48) for label, c in MODES}
        if not args.no_warmup:
            per["warmup_1_8"] = warmup_keys(models)
        save(args.out, name, record, _table(record, rows))
        del models
        if CUDA:
            torch.cuda.empty_cache()
    _plot(record, args.out, name)
    save(args.out, name, record, _table(record, rows))


def _table(record: dict, rows: list[str]) -> str:
    env = record["env"]
    lines = [
        f"# Compiled model inside the step graph, {env['date']}, {env['gpu']}, torch {env['torch']}, "
        f"triton {env['triton']}",
        "",
        f"Example model at the Qwen3-0.6B shape ({record['layers']} layers), bf16, K={K}, cache 1024, prompt "
        f"{PROMPT}, greedy. Device time: back-to-back replays of the key's step graph. Floor: weights read per "
        "step at 4.3 TB/s.",
        "",
        *rows,
        "",
    ]
    for attention, per in record["results"].items():
        lines.append(f"- **{attention}**: memory floor {per['floor_ms']:.3f} ms per step.")
        ro = per["batches"].get(1, {}).get("reduce_overhead")
        if ro:
            lines.append(
                f"  torch.compile reduce-overhead (B = 1): {ro['ms']:.3f} ms ({ro['compile_s']:.0f} s to compile)"
                if ro.get("ms")
                else f"  torch.compile reduce-overhead: {ro.get('error')}"
            )
        if "agreement" in per:
            a = per["agreement"]
            lines.append(
                "  Greedy agreement with the target's own greedy decoding (prefix fraction, 4 requests x 48 "
                f"tokens): eager kernels {a['eager kernels']:.2f}, compiled {a['compiled']:.2f}."
            )
        if "warmup_1_8" in per:
            w = per["warmup_1_8"]
            lines.append(
                f"  Warm-up of keys 1..8 with compile: {w['seconds']:.1f} s; compile per key (s): "
                + ", ".join(f"{k} {v:.1f}" for k, v in w["compile_s"].items())
            )
    return "\n".join(lines) + "\n"


def _plot(record: dict, out: str, name: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot (redraw later with --plot JSON)")
        return
    results = record["results"]
    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4), squeeze=False)
    for ax, (attention, per) in zip(axes[0], results.items()):
        batches = list(per["batches"])
        x = range(len(batches))
        for i, (label, _) in enumerate(MODES):
            ys = [per["batches"][b][label]["device_ms"] for b in batches]
            ax.bar([j + (i - 0.5) * 0.38 for j in x], ys, width=0.38, label=label)
        ax.axhline(per["floor_ms"], color="k", linestyle="--", label=f"memory floor {per['floor_ms']:.2f} ms")
        ax.set_xticks(list(x), [f"B={b}" for b in batches])
        ax.set_ylabel("step device time (ms)")
        ax.set_title(f"attention: {attention}")
        ax.set_ylim(0, 1.35 * max(per["batches"][b][m]["device_ms"] for b in batches for m, _ in MODES))
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(f"{record['layers']}-layer example model, step graph: eager kernels vs compile=True")
    fig.tight_layout()
    Path(out).mkdir(parents=True, exist_ok=True)
    fig.savefig(Path(out) / f"{name}.png", dpi=120)


if __name__ == "__main__":
    main()
