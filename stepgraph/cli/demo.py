"""``python -m stepgraph demo``: speculative decoding of the example model with the chain step graph.

On a GPU it warms up (captures the keys), decodes a batch with the step graph and again eagerly,
checks that greedy outputs agree, and prints the capture report, tokens per second and the mean
accepted length. On a CPU it runs the same loop eagerly and says so.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from pathlib import Path

import torch
from rich.console import Console

from stepgraph.config import RunnerConfig, Toggles
from stepgraph.keys import SamplingParams
from stepgraph.report import print_report


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="speculative decoding of the example model (the main job)")
    p.add_argument("--preset", default="tiny", choices=["tiny", "qwen3-0.6b"], help="model shape (default tiny)")
    p.add_argument("--layers", type=int, help="override: number of target layers")
    p.add_argument("--hidden", type=int, help="override: hidden size")
    p.add_argument("--heads", type=int, help="override: attention heads (KV heads = heads/2)")
    p.add_argument("--vocab", type=int, help="override: vocabulary size")
    p.add_argument(
        "--attention",
        default="sdpa",
        choices=["sdpa", "triton"],
        help="example model attention: masked SDPA over the whole cache, or Triton decode attention up to each length",
    )
    p.add_argument("--draft", default="eagle", choices=["eagle", "same"], help="EAGLE head, or a copy of the target")
    p.add_argument("--batch", type=int, default=4, help="requests decoded together (default 4)")
    p.add_argument("--k", type=int, default=3, help="draft tokens per step (default 3)")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--sampling", default="greedy", choices=["greedy", "temperature", "top_k_top_p"])
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--overlap", action="store_true", help="overlapped loop (host one step ahead; GPU only)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--json", help="save the report, stats and generated token ids to this file")
    p.add_argument("--quiet", action="store_true", help="no capture log lines")


def _params(args) -> SamplingParams:
    if args.sampling == "greedy":
        return SamplingParams()
    if args.sampling == "temperature":
        return SamplingParams(temperature=args.temperature)
    return SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)


def _overrides(args) -> dict:
    o = {}
    if args.layers:
        o["num_layers"] = args.layers
    if args.hidden:
        o["hidden_size"] = args.hidden
        o["intermediate_size"] = 2 * args.hidden
    if args.heads:
        o["num_heads"], o["num_kv_heads"] = args.heads, max(1, args.heads // 2)
    if args.vocab:
        o["vocab_size"] = args.vocab
    o["max_requests"] = max(args.batch, 1)
    o["attention"] = args.attention
    return o


def _decode(args, device, dtype, toggles: Toggles, prompts, *, graphs: bool):
    from stepgraph.examples.model import build
    from stepgraph.spec.generate import GenerationStats, SpecDecoder

    target, draft = build(args.preset, device=device, dtype=dtype, draft=args.draft, **_overrides(args))
    cfg = RunnerConfig(toggles=toggles if graphs else replace(toggles, step_graph=False), progress=not args.quiet)
    dec = SpecDecoder.for_example(
        target, draft, num_draft_tokens=args.k, max_batch=args.batch, config=cfg, seed=args.seed
    )
    if graphs and dec.runner.graphs_available:
        dec.warmup(args.batch, _params(args).sampling)
    if device.type == "cuda":  # an untimed pass: first-use costs (prefill shapes, pinned buffers) stay out
        dec.generate(prompts, max_new_tokens=min(8, args.max_new_tokens), sampling=_params(args), overlap=args.overlap)
        dec.stats = GenerationStats()  # the timed pass's own figures
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = dec.generate(prompts, max_new_tokens=args.max_new_tokens, sampling=_params(args), overlap=args.overlap)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    tokens = sum(len(o) for o in out)
    return (
        dec,
        out,
        {
            "seconds": round(seconds, 4),
            "tokens": tokens,
            "tokens_per_second": round(tokens / seconds, 1),
            **dec.stats.as_dict(),
        },
    )


def run(args) -> int:
    console = Console()
    if not args.quiet:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    toggles = Toggles.from_env()
    from stepgraph.examples.model import PRESETS

    vocab = args.vocab or PRESETS[args.preset].vocab_size
    g = torch.Generator().manual_seed(args.seed)
    prompts = [
        torch.randint(0, vocab, (int(n),), generator=g).tolist()
        for n in torch.randint(4, 17, (args.batch,), generator=g)
    ]
    record = {"args": vars(args), "device": str(device), "torch": torch.__version__, "prompts": prompts}

    if device.type != "cuda" or not toggles.step_graph:
        why = (
            "no CUDA device: running the same loop eagerly (no graphs)"
            if device.type != "cuda"
            else "STEPGRAPH_ENABLE=0: eager"
        )
        console.print(f"[bold yellow]{why}[/]")
        dec, out, stats = _decode(args, device, dtype, toggles, prompts, graphs=False)
        runs = {"eager": stats}
        infos = [dec.info()]
        record["outputs"] = {"eager": out}
    else:
        console.print(f"[bold]step graph on {torch.cuda.get_device_name(device)}[/]: warm-up, capture, decode")
        dec, out, stats = _decode(args, device, dtype, toggles, prompts, graphs=True)
        _, eager_out, eager_stats = _decode(args, device, dtype, toggles, prompts, graphs=False)
        runs = {"step_graph": stats, "eager": eager_stats}
        infos = [dec.info()]
        record["outputs"] = {"step_graph": out, "eager": eager_out}
        if args.sampling == "greedy":
            same = out == eager_out
            record["greedy_outputs_identical"] = same
            console.print(f"greedy outputs identical (step graph vs eager): [bold]{'yes' if same else 'NO'}[/]")
        print_report(infos[0], console=console)
    for mode, s in runs.items():
        console.print(
            f"[bold]{mode:>10}[/]: {s['tokens']} tokens in {s['seconds']:.3f} s = {s['tokens_per_second']:.1f} tok/s, "
            f"{s['steps']} steps, mean accepted length {s['mean_accept_len']:.2f} (of K+1 = {args.k + 1})"
        )
    if "step_graph" in runs:
        console.print(
            f"step graph speed-up: {runs['step_graph']['tokens_per_second'] / runs['eager']['tokens_per_second']:.2f}x"
        )
    console.print(f"first request's tokens: {next(iter(record['outputs'].values()))[0][:24]}")
    if args.json:
        record.update(runs=runs, runners=infos)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(record, indent=2, default=str))
        console.print(f"saved {args.json}")
    return 0
