"""python -m stepgraph demo: speculative decoding of the example model with the chain step graph.

On a GPU it warms up (captures the keys), decodes a batch with the step graph and again eagerly, and
checks that greedy outputs agree; on a CPU it runs the same loop eagerly. Standard output carries only
the results (each request's tokens and the mean accepted length), the same for a given seed whatever
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

from stepgraph.cli.parser import HelpFormatter
from stepgraph.config import RunnerConfig, Toggles
from stepgraph.report import print_report
from stepgraph.sampling import CLASSES, PENALTY_FIELDS, SamplingParams, sampling_class

#: The most requests the demo decodes at once (a serving batch is at most 64 here; memory is checked too).
MAX_BATCH = 1024
#: The sampling flags: ``None`` in the parser, so that a flag given for nothing is refused; their defaults are
#: the chosen class's example settings (``SamplingClass.example``).
SAMPLING_FLAGS = ("temperature", "top_k", "top_p", "min_p")


def bounded_int(low: int, high: int):
    """An argparse type: an integer in ``[low, high]`` (the message names the value and the range)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        if value > high:
            raise argparse.ArgumentTypeError(f"must be <= {high}, got {value}")
        return value

    return parse


positive_int = bounded_int(1, 2**31 - 1)
MAX_K = 64


def draft_tokens(text: str) -> int | str | dict[int, int]:
    """An argparse type for ``--k``: an int K in 0..64, ``auto``, or a schedule ``B:K,B:K`` (``1:4,8:2``)."""
    if text == "auto":
        return text
    if ":" in text:
        schedule = {}
        for part in text.split(","):
            b, _, k = part.partition(":")
            schedule[bounded_int(1, MAX_BATCH)(b.strip())] = bounded_int(0, MAX_K)(k.strip())
        return schedule
    return bounded_int(0, MAX_K)(text)


def _max_k(k) -> int:
    """The longest draft ``--k`` can take (the cache must hold it)."""
    from stepgraph.speculative.draft_policy import AUTO_DRAFT_LENS

    return max(AUTO_DRAFT_LENS) if k == "auto" else max(k.values()) if isinstance(k, dict) else k


def add_parser(sub) -> None:
    p = sub.add_parser(
        "demo", help="speculative decoding of the example model (the main job)", description=__doc__,
        formatter_class=HelpFormatter,
    )  # fmt: skip
    p.add_argument("--preset", default="tiny", choices=["tiny", "qwen3-0.6b"], help="model shape")
    p.add_argument("--layers", type=bounded_int(1, 512), help="override: number of target layers")
    p.add_argument("--hidden", type=bounded_int(2, 65536), help="override: hidden size")
    p.add_argument("--heads", type=bounded_int(1, 1024), help="override: attention heads (KV heads = heads / 2)")
    p.add_argument("--vocab", type=bounded_int(2, 2**24), help="override: vocabulary size")
    p.add_argument(
        "--attention", default="sdpa", choices=["sdpa", "triton"],
        help="the example model's attention: masked SDPA over the whole cache, or a Triton decode attention "
        "up to each length (a GPU, or TRITON_INTERPRET=1)",
    )  # fmt: skip
    p.add_argument(
        "--matmul", default="torch", choices=["torch", "triton"],
        help="the MLP's down projection: cuBLAS, or the Triton skinny matmul (few rows per step)",
    )  # fmt: skip
    p.add_argument(
        "--kv", default="paged", choices=["paged", "rows"],
        help="the KV cache: pages handed out as requests grow (default), or a row of the whole length per request",
    )  # fmt: skip
    p.add_argument("--page-size", type=bounded_int(1, 4096), default=16, help="positions per page (--kv paged)")
    p.add_argument(
        "--draft", default="eagle", choices=["eagle", "eagle3", "mtp", "same", "ngram"],
        help="an EAGLE head, an EAGLE-3 head (the target tapped at three layers), a DeepSeek-style MTP head, a copy "
        "of the target, or prompt lookup (n-gram matches in each request's own tokens)",
    )  # fmt: skip
    p.add_argument(
        "--compile", action="store_true",
        help="torch.compile the target and draft forwards (inductor) inside the step graph; both runs compile",
    )  # fmt: skip
    p.add_argument("--batch", type=bounded_int(1, MAX_BATCH), default=4, help="requests decoded together")
    p.add_argument(
        "--k", type=draft_tokens, default=3,
        help="draft tokens per step: K in 0..64 (0: plain decoding), 'auto' (the K of most tokens per second at "
        "each step, from measured step times and acceptance), or a schedule by batch size (1:4,8:2,32:0)",
    )  # fmt: skip
    p.add_argument("--max-new-tokens", type=positive_int, default=48, help="new tokens per request")
    p.add_argument(
        "--sampling", default="greedy", choices=[c.name for c in CLASSES], metavar="CLASS",
        help="the requests' sampling class: " + "; ".join(f"{c.name}: {c.summary}" for c in CLASSES),
    )  # fmt: skip
    p.add_argument("--temperature", type=float, help="temperature of the sampled classes (default 0.8)")
    p.add_argument("--top-k", type=int, help="top-k of the filtered classes (0: off; default 40)")
    p.add_argument("--top-p", type=float, help="top-p of the filtered classes (1: off; default 0.9)")
    p.add_argument("--min-p", type=float, help="min-p of the filtered classes (0: off; default 0)")
    p.add_argument(
        "--repetition-penalty",
        type=float,
        default=1.0,
        help="Hugging Face's repetition penalty over prompt and output, any class (1: off)",
    )
    p.add_argument(
        "--presence-penalty",
        type=float,
        default=0.0,
        help="the OpenAI API's presence penalty over the output, -2..2, any class (0: off)",
    )
    p.add_argument("--frequency-penalty", type=float, default=0.0,
                   help="the OpenAI API's frequency penalty over the output, -2..2, any class (0: off)")  # fmt: skip
    p.add_argument("--no-repeat-ngram-size", type=bounded_int(0, 2**31 - 1), default=0,
                   help="Hugging Face's n-gram ban: no n-gram of this size twice in prompt and output")  # fmt: skip
    p.add_argument(
        "--seed", type=bounded_int(-(2**63), 2**63 - 1), default=0, help="seeds the prompts and the sampling"
    )
    p.add_argument(
        "--overlap", action="store_true",
        help="the overlapped loop: the host launches a step before it reads the last one's tokens (on a CPU the "
        "same loop runs with synchronous copies: the same tokens)",
    )  # fmt: skip
    p.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda when available)")
    p.add_argument("--json", help="save the report, stats and generated token ids to this file")
    p.add_argument("--quiet", action="store_true", help="no capture log lines or report (results only)")


def _sampling_flags(args) -> dict:
    """The sampling flags' values, each default filled in from the class's example settings; a flag given
    that the class does not read is an error naming it."""
    chosen = sampling_class(args.sampling)
    reads = (
        set()
        if chosen.kernel is None
        else {"temperature"} | ({"top_k", "top_p", "min_p"} if chosen.kernel["filtered"] else set())
    )
    given = [name for name in SAMPLING_FLAGS if getattr(args, name) is not None and name not in reads]
    if given:
        flags = ", ".join("--" + n.replace("_", "-") for n in given)
        raise ValueError(f"{flags}: --sampling {chosen.name} does not use it; choose a class that does, or drop it")
    return {n: getattr(chosen.example, n) if getattr(args, n) is None else getattr(args, n) for n in SAMPLING_FLAGS}


def _params(args) -> SamplingParams:
    chosen = sampling_class(args.sampling)
    flags = _sampling_flags(args)
    penalties = {name: getattr(args, name) for name in (*PENALTY_FIELDS, "no_repeat_ngram_size")}
    if chosen.kernel is None:
        return SamplingParams(**penalties)
    if not chosen.kernel["filtered"]:
        return SamplingParams(temperature=flags["temperature"], **penalties)
    params = SamplingParams(**flags, **penalties)
    if params.sampling is not chosen.sampling:
        given = " ".join(
            f"--{n.replace('_', '-')} {flags[n]}" for n in SAMPLING_FLAGS if flags[n] != getattr(chosen.example, n)
        )
        raise ValueError(
            f"--sampling {chosen.name} serves {chosen.summary}; with {given} the request's class is "
            f"{params.sampling}: pass --sampling {params.sampling}, or change them"
        )
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
    o["kv"], o["page_size"] = args.kv, args.page_size
    return o


def _decode(args, device, dtype, toggles: Toggles, prompts, *, graphs: bool):
    from stepgraph.examples.model import build
    from stepgraph.speculative.decoder import GenerationStats, SpecDecoder

    target, draft = build(args.preset, device=device, dtype=dtype, draft=args.draft, **_overrides(args))
    cfg = RunnerConfig(toggles=toggles if graphs else replace(toggles, step_graph=False), progress=not args.quiet)
    dec = SpecDecoder.for_example(
        target, draft, num_draft_tokens=args.k, max_batch=args.batch, config=cfg, seed=args.seed, compile=args.compile,
        penalties=_params(args).needs_penalty_state is not None,
    )  # fmt: skip
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
    if device.type == "cpu" and device.index not in (None, 0):
        raise ValueError(f"--device {name}: the CPU has no device index; use --device cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name}: CUDA is not available here; use --device cpu or leave it unset")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


def _check_sizes(args, device: torch.device, dtype: torch.dtype) -> None:
    """Refuse before any work a request that cannot fit the example model's cache, or a model and caches
    that cannot fit this device's free memory (naming the flags to change)."""
    from stepgraph.examples.model import PRESETS

    cfg = replace(
        PRESETS[args.preset],
        **{k: v for k, v in _overrides(args).items() if k not in ("attention", "matmul", "kv", "page_size")},
    )
    longest_prompt = 16
    need = longest_prompt + args.max_new_tokens + 2 * (_max_k(args.k) + 1)
    if need > cfg.max_seq_len:
        raise ValueError(
            f"--max-new-tokens {args.max_new_tokens} with --k {_max_k(args.k)} needs {need} cache positions (prompts "
            f"of up to {longest_prompt} tokens + new tokens + 2 * (K + 1)); the {args.preset} model's cache has "
            f"{cfg.max_seq_len}: lower --max-new-tokens or --k"
        )
    if cfg.hidden_size % cfg.num_heads:
        raise ValueError(f"--hidden {cfg.hidden_size} must be a multiple of --heads {cfg.num_heads}")
    element = torch.tensor([], dtype=dtype).element_size()
    layer = (
        cfg.hidden_size * (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
        + 3 * cfg.hidden_size * cfg.intermediate_size
    )
    cache = 2 * cfg.num_kv_heads * cfg.max_seq_len * cfg.head_dim  # per layer and cache row
    rows = cfg.max_requests + 1
    needed = element * ((cfg.num_layers + 1) * (layer + rows * cache) + 2 * cfg.vocab_size * cfg.hidden_size)
    needed *= 2  # the step graph and the eager run each build the models
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
    else:
        import os

        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if needed > free:
        raise ValueError(
            f"--batch {args.batch} with this model needs about {needed / 2**30:.1f} GiB (weights and a KV cache row "
            f"per request), more than the {free / 2**30:.1f} GiB free on {device}: lower --batch or the model's size"
        )


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
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    _check_sizes(args, device, dtype)
    if args.json:
        _check_writable(args.json)
    out = Console(soft_wrap=True)  # results only: deterministic for a seed, compared by bisect
    err = Console(stderr=True)  # everything else: modes, log, report, timings
    if not args.quiet:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
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
        f"mean accepted length {stats['mean_accept_len']:.2f} (of K+1 = {_max_k(args.k) + 1} at most)", highlight=False
    )
    if not isinstance(args.k, int):
        err.print(f"draft lengths taken (K: steps): {stats['draft_len_steps']}")
    err.print(f"{stats['steps']} steps ({stats['discarded_steps']} request-steps discarded by the overlapped loop)")
    if args.json:
        record.update(runs=runs, runners=infos)
        try:
            Path(args.json).write_text(json.dumps(record, indent=2, default=str))
        except OSError as e:
            raise ValueError(
                f"--json {args.json} could not be written ({e.strerror or e}); the results are above"
            ) from None
        err.print(f"saved {args.json}")
    return 0
