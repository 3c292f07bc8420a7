"""python -m stepgraph demo: speculative decoding of the example model with the chain step graph.

On a GPU it warms up (captures the keys), decodes a batch with the step graph and again eagerly, and
checks that greedy outputs agree; on a CPU it runs the same loop eagerly. Standard output carries only
the results (each request's tokens, steps, mean accepted length), the same for a given seed whatever
the toggles, so that "python -m stepgraph bisect -- python -m stepgraph demo" can compare runs; the
capture log, report, timings and speed-up go to standard error.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import replace
from pathlib import Path

import torch
from rich.console import Console

from stepgraph.config import RunnerConfig, Toggles
from stepgraph.report import print_report
from stepgraph.sampling import CLASSES, SamplingParams, sampling_class


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (the message names the value)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_parser(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="speculative decoding of the example model (the main job)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", default="tiny", choices=["tiny", "qwen3-0.6b"], help="model shape (default tiny)")
    p.add_argument("--layers", type=positive_int, help="override: number of target layers")
    p.add_argument("--hidden", type=positive_int, help="override: hidden size")
    p.add_argument("--heads", type=positive_int, help="override: attention heads (KV heads = heads/2)")
    p.add_argument("--vocab", type=positive_int, help="override: vocabulary size")
    p.add_argument(
        "--attention",
        default="sdpa",
        choices=["sdpa", "triton"],
        help="example model attention: masked SDPA over the whole cache, or Triton decode attention up to each length",
    )
    p.add_argument(
        "--matmul",
        default="torch",
        choices=["torch", "triton"],
        help="example model's MLP down projection: cuBLAS, or the Triton skinny matmul (few rows per step)",
    )
    p.add_argument("--draft", default="eagle", choices=["eagle", "same"], help="EAGLE head, or a copy of the target")
    p.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the target and draft forwards (inductor) inside the step graph; both runs compile",
    )
    p.add_argument("--batch", type=positive_int, default=4, help="requests decoded together (default 4)")
    p.add_argument("--k", type=positive_int, default=3, help="draft tokens per step (default 3)")
    p.add_argument("--max-new-tokens", type=positive_int, default=48, help="new tokens per request (default 48)")
    p.add_argument(
        "--sampling",
        default="greedy",
        choices=[c.name for c in CLASSES],
        help="the requests' sampling class: "
        + "; ".join(f"{c.name}: {c.summary}" for c in CLASSES)
        + " (the filtered classes take --top-k, --top-p and --min-p; default greedy)",
    )
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--min-p", type=float, default=0.0, help="min-p filter of top_k_top_p sampling (default 0: off)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--overlap", action="store_true", help="overlapped loop (host one step ahead; GPU only)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--json", help="save the report, stats and generated token ids to this file")
    p.add_argument("--quiet", action="store_true", help="no capture log lines or report (results only)")


def _params(args) -> SamplingParams:
    chosen = sampling_class(args.sampling)
    if chosen.kernel is None:
        return SamplingParams()
    if not chosen.kernel["filtered"]:
        return SamplingParams(temperature=args.temperature)
    params = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p)
    if not chosen.fits(params):
        raise ValueError(f"--sampling {chosen.name} serves {chosen.summary}; --top-k {args.top_k} is outside it")
    return params


def _overrides(args) -> dict:
    o = {}
    if args.layers is not None:
        o["num_layers"] = args.layers
    if args.hidden is not None:
        o["hidden_size"] = args.hidden
        o["intermediate_size"] = 2 * args.hidden
    if args.heads is not None:
        o["num_heads"], o["num_kv_heads"] = args.heads, max(1, args.heads // 2)
    if args.vocab is not None:
        o["vocab_size"] = args.vocab
    o["max_requests"] = max(args.batch, 1)
    o["attention"] = args.attention
    o["matmul"] = args.matmul
    return o


def _decode(args, device, dtype, toggles: Toggles, prompts, *, graphs: bool):
    from stepgraph.examples.model import build
    from stepgraph.speculative.decoder import GenerationStats, SpecDecoder

    target, draft = build(args.preset, device=device, dtype=dtype, draft=args.draft, **_overrides(args))
    cfg = RunnerConfig(toggles=toggles if graphs else replace(toggles, step_graph=False), progress=not args.quiet)
    dec = SpecDecoder.for_example(
        target, draft, num_draft_tokens=args.k, max_batch=args.batch, config=cfg, seed=args.seed, compile=args.compile
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


def _device(name: str | None) -> torch.device:
    """The device to run on; a clear error for a name torch does not know or a CUDA device absent here."""
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"--device {name!r} is not a device; use cuda, cuda:N or cpu") from None
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"--device {name!r}: the demo runs on cuda or cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name}: CUDA is not available here; use --device cpu or leave it unset")
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


def _check_writable(path: str) -> None:
    """Fail before decoding, not after, when ``--json`` cannot be written."""
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"--json {path} is a directory; give a file name")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a"):
            pass
    except OSError as e:
        raise ValueError(f"--json {path} cannot be written ({e.strerror or e}); choose another path") from None


def run(args) -> int:
    device = _device(args.device)  # every flag is checked before any work
    _params(args)
    if args.json:
        _check_writable(args.json)
    out = Console(soft_wrap=True)  # results only: deterministic for a seed, compared by bisect
    err = Console(stderr=True)  # everything else: modes, log, report, timings
    if not args.quiet:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
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
        err.print(f"[bold yellow]{why}[/]")
        dec, tokens, stats = _decode(args, device, dtype, toggles, prompts, graphs=False)
        runs = {"eager": stats}
        record["outputs"] = {"eager": tokens}
    else:
        err.print(f"[bold]step graph on {torch.cuda.get_device_name(device)}[/]: warm-up, capture, decode")
        dec, tokens, stats = _decode(args, device, dtype, toggles, prompts, graphs=True)
        _, eager_tokens, eager_stats = _decode(args, device, dtype, toggles, prompts, graphs=False)
        runs = {"step_graph": stats, "eager": eager_stats}
        record["outputs"] = {"step_graph": tokens, "eager": eager_tokens}
        if args.sampling == "greedy":
            same = tokens == eager_tokens
            record["greedy_outputs_identical"] = same
            err.print(f"greedy outputs identical (step graph vs eager): [bold]{'yes' if same else 'NO'}[/]")
    infos = [dec.info()]
    if not args.quiet:
        print_report(infos[0], console=err)
    for mode, st in runs.items():
        err.print(
            f"[bold]{mode:>10}[/]: {st['tokens']} tokens in {st['seconds']:.3f} s = {st['tokens_per_second']:.1f} tok/s"
        )
    if "step_graph" in runs:
        speedup = runs["step_graph"]["tokens_per_second"] / runs["eager"]["tokens_per_second"]
        err.print(f"step graph speed-up: {speedup:.2f}x")
    for i, ids in enumerate(tokens):
        out.print(f"request {i}: {len(ids)} tokens: {ids}", highlight=False)
    out.print(
        f"{stats['steps']} steps, mean accepted length {stats['mean_accept_len']:.2f} (of K+1 = {args.k + 1})",
        highlight=False,
    )
    if args.json:
        record.update(runs=runs, runners=infos)
        Path(args.json).write_text(json.dumps(record, indent=2, default=str))
        err.print(f"saved {args.json}")
    return 0
