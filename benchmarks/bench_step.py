"""Step benchmark: eager vs per-stage graphs vs the step graph vs torch.compile, on the example model.

Qwen3-0.6B shape (28 layers, hidden 1024, 16 heads, MLP 3072, vocabulary 151936, bf16), K = 3, a static KV
cache of 1024 positions, EAGLE-style draft head. Per batch size, all in one run:

* eager: the plain path (every piece off, no graphs), one host read of the tokens per step;
* per-stage graphs: draft, verify and draft-extend captured separately, with the host sync a per-stage
  design needs between verify and draft-extend;
* step graph: stepgraph's whole-step graph, one host read of the tokens per step;
* device time: back-to-back replays of the step graph with no host sync (occupancy = device / step);
* torch.compile(mode="reduce-overhead") on the eager step (batch 1 only: it takes a while to compile).

Also the capture time per key and the graph memory of keys 1..8 in one shared pool against each key alone.

    python benchmarks/bench_step.py --out benchmarks/results/<dir> [--batches 1,8,32] [--layers 28] [--no-compile]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import torch
from _timing import CUDA, DEVICE, add_smoke_flag, env_record, save, smoke, sync

from stepgraph import RunnerConfig, Sampling, SamplingParams, Toggles
from stepgraph.examples.model import build
from stepgraph.kv import RowKV
from stepgraph.speculative.decoder import SpecDecoder

K = 3
PROMPT = 128


class Setup:
    """Models + a decoder per mode, with B requests prefilled and the relay state snapshotted."""

    def __init__(
        self,
        B: int,
        layers: int,
        max_requests: int,
        prompt: int = PROMPT,
        max_seq_len: int = 1024,
        attention="sdpa",
        models=None,
        matmul="torch",
        preset: str = "qwen3-0.6b",
    ) -> None:
        self.B = B
        self.target, self.draft = models or build(
            preset,
            device=DEVICE,
            dtype=torch.bfloat16 if CUDA else torch.float32,
            num_layers=layers,
            max_requests=max_requests,
            max_seq_len=max_seq_len,
            attention=attention,
            matmul=matmul,
        )
        self.decoders = {}
        g = torch.Generator().manual_seed(0)
        vocab = self.target.cfg.vocab_size
        self.prompts = [torch.randint(0, vocab, (prompt,), generator=g).tolist() for _ in range(B)]

    def decoder(
        self, name: str, toggles: Toggles, buckets=None, splice_stages=False, sampling=None, compile=False
    ) -> SpecDecoder:
        cfg = RunnerConfig(toggles=toggles, progress=False, buckets=buckets or (self.B,))
        c = self.target.cfg  # each decoder its own rows (over the same cache): every mode keeps a resident batch
        dec = SpecDecoder.for_example(
            self.target,
            self.draft,
            num_draft_tokens=K,
            max_batch=max(self.B, 8),
            config=cfg,
            splice_stages=splice_stages,
            compile=compile,
            kv_cache=RowKV(c.max_requests, c.max_seq_len, self.target.device),
        )
        requests = dec.make_requests(self.prompts, 64, sampling or SamplingParams())
        slots = dec.admit(requests)  # resident: every step replays over them
        resident = Resident(dec, slots, {n: f.clone() for n, f in dec.step.relay.fields.items()})
        self.decoders[name] = resident
        return resident


class Resident:
    """A decoder with a fixed batch of prefilled requests: ``slots [B]`` and the relay state to restore
    between timed repeats. Everything else is the decoder's (attributes pass through)."""

    def __init__(self, dec: SpecDecoder, slots: torch.Tensor, snapshot: dict) -> None:
        self.dec, self.slots, self.snapshot = dec, slots, snapshot

    def __getattr__(self, name):
        return getattr(self.dec, name)


def restore(dec: SpecDecoder) -> None:
    for n, f in dec.step.relay.fields.items():
        f.copy_(dec.snapshot[n])


GRAPH_TIMING = {"steps": 100, "repeats": 5}  # graph modes are fast: more samples steady the host figures


def time_steps(step_once, dec: SpecDecoder, steps: int = 40, repeats: int = 3) -> float:
    """Median over repeats of the mean wall time per synchronous step (state restored between repeats)."""
    if GRAPH_TIMING["steps"] < 40:  # a smoke run
        steps, repeats = GRAPH_TIMING["steps"], 1
    out = []
    for _ in range(repeats):
        restore(dec)
        for _ in range(min(3, steps)):
            step_once()
        sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            step_once()
        sync()
        out.append((time.perf_counter() - t0) / steps)
    return statistics.median(out) * 1e3


def mode_eager(setup: Setup) -> float:
    dec = setup.decoder("eager", Toggles.all(False))
    dec.step.run(dec.slots, Sampling.GREEDY)

    def once():
        dec.step.run(None, Sampling.GREEDY, batch_size=setup.B)["tokens"].cpu()

    return time_steps(once, dec)


def mode_eager_fused(setup: Setup) -> float:
    """The same step eagerly with every fused piece on (no graph): Triton launches pay Python overhead."""
    dec = setup.decoder("eager_fused", replace(Toggles.all(True), step_graph=False))
    dec.step.run(dec.slots, Sampling.GREEDY)

    def once():
        dec.step.run(None, Sampling.GREEDY, batch_size=setup.B)["tokens"].cpu()

    return time_steps(once, dec)


def mode_step_graph(setup: Setup, name: str = "graph", **decoder_kwargs) -> tuple[float, float, float]:
    """Synchronous step (ms), device time of back-to-back replays (ms), capture of the key (ms)."""
    dec = setup.decoder(name, Toggles.all(True), **decoder_kwargs)
    dec.step.run(dec.slots, Sampling.GREEDY)  # captures the key (on parked state) and replays
    runner = dec.step.runner
    assert runner.info()["captured_keys"] or not CUDA, runner.info()

    def once():
        dec.read_tokens(runner.run(None, Sampling.GREEDY, batch_size=setup.B)["tokens"])

    sync_ms = time_steps(once, dec, **GRAPH_TIMING)
    key = runner.key_for(setup.B)
    graph = runner.stats(key).captured
    restore(dec)
    device_ms = time_steps(graph.replay, dec, **GRAPH_TIMING) if graph is not None else float("nan")
    return sync_ms, device_ms, runner.stats(key).capture_seconds * 1e3


def mode_spliced(setup: Setup) -> tuple[float, float]:
    """The step graph built from spliced per-stage graphs (stepgraph.splice): sync and device time."""
    dec = setup.decoder("spliced", Toggles.all(True), splice_stages=True)
    dec.step.run(dec.slots, Sampling.GREEDY)
    runner = dec.step.runner
    assert runner.info()["captured_keys"] or not CUDA, runner.info()

    def once():
        dec.read_tokens(runner.run(None, Sampling.GREEDY, batch_size=setup.B)["tokens"])

    sync_ms = time_steps(once, dec, **GRAPH_TIMING)
    graph = runner.stats(runner.key_for(setup.B)).captured
    return sync_ms, time_steps(graph.replay, dec, **GRAPH_TIMING) if graph is not None else float("nan")


def mode_per_stage(setup: Setup) -> float:
    """The step's stages as three graphs (draft, verify, draft-extend with the relay commit) with a host sync
    between verify and draft-extend, as a per-stage design needs (on the CPU: the stages run eagerly)."""
    dec = setup.decoder("stages", Toggles.all(True))
    step = dec.step
    B = setup.B
    step.runner.buffers.copy_in({"slots": dec.slots}, B, B)
    slots = step.runner.buffers["slots"][:B]
    draft, verify, extend, commit = step.stages

    def stage_calls(ctx):  # the three graphs' contents, in order
        return (
            lambda: step.run_stage(draft, ctx),
            lambda: step.run_stage(verify, ctx),
            lambda: (step.run_stage(extend, ctx), step.run_stage(commit, ctx)),
        )

    with step.relay.parked():
        ctx = step.context(slots, B, Sampling.GREEDY, step.K)
        calls = stage_calls(ctx)
        if CUDA:
            pool, s = torch.cuda.graph_pool_handle(), torch.cuda.Stream()
            for _ in range(2):  # warm-up on the side stream
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for call in calls:
                        call()
                torch.cuda.current_stream().wait_stream(s)
            sync()
            graphs = [torch.cuda.CUDAGraph() for _ in calls]
            for graph, call in zip(graphs, calls):
                with torch.cuda.graph(graph, pool=pool, stream=s):
                    call()
            replays = [g.replay for g in graphs]
        else:
            replays = list(calls)
    restore(dec)

    def once():
        replays[0]()
        replays[1]()
        ctx.verified.num_accepted.cpu()  # the per-stage design reads accept lengths before planning draft-extend
        replays[2]()
        ctx.verified.tokens.cpu()

    return time_steps(once, dec, **GRAPH_TIMING)


def mode_compile(setup: Setup) -> dict:
    dec = setup.decoder("compile", Toggles.all(False))
    step = dec.step
    B = setup.B
    step.runner.buffers.copy_in({"slots": dec.slots}, B, B)
    views = step.runner.buffers.views(B)

    def plain_step():
        return step.runner.step(views, B, Sampling.GREEDY, step.K)["tokens"]  # the step function itself, eager

    try:
        import torch._dynamo

        torch._dynamo.reset()
        # on the CPU (a smoke run) the eager backend: the call path without inductor's minutes of compiling
        compiled = (
            torch.compile(plain_step, mode="reduce-overhead") if CUDA else torch.compile(plain_step, backend="eager")
        )
        t0 = time.perf_counter()
        for _ in range(3):  # compile + record the cudagraph tree
            compiled().cpu()
        sync()
        compile_s = time.perf_counter() - t0
        ms = time_steps(lambda: compiled().cpu(), dec)
        from torch._dynamo.utils import counters

        skips = dict(counters.get("inductor", {}))
        return {
            "ms": ms,
            "compile_s": compile_s,
            "inductor_counters": {k: v for k, v in skips.items() if "cudagraph" in k},
        }
    except Exception as e:  # noqa: BLE001 - report why it did not run
        return {"ms": None, "error": f"{type(e).__name__}: {str(e)[:400]}"}


def memory_keys(setup: Setup) -> dict:
    """Keys 1..8 captured into one shared pool, against each key captured alone."""
    dec = setup.decoder("keys", Toggles.all(True), buckets=tuple(range(1, 9)))
    runner = dec.step.runner
    sync()
    t0 = time.perf_counter()
    with dec.step.relay.parked():
        runner.capture([(b, "greedy") for b in range(1, 9)])
    total_s = time.perf_counter() - t0
    info = runner.info()
    shared = info["graph_pool_bytes"]
    per_key = {k: v["capture_ms"] for k, v in info["keys"].items()}
    runner.release()
    alone = {}
    for b in range(1, 9):
        d = setup.decoder(f"alone{b}", Toggles.all(True), buckets=tuple(range(1, 9)))
        with d.step.relay.parked():
            d.step.runner.capture([(b, "greedy")])
        alone[b] = d.step.runner.info()["graph_pool_bytes"]
        d.step.runner.release()
    return {
        "shared_pool_bytes": shared,
        "alone_bytes": alone,
        "largest_alone_bytes": max(alone.values()),
        "ratio_shared_to_largest": shared / max(alone.values()) if max(alone.values()) else float("nan"),
        "capture_ms_per_key": per_key,
        "capture_all_seconds": total_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/latest")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--prompt", type=int, default=PROMPT, help="prompt tokens per request")
    ap.add_argument("--max-seq-len", type=int, default=1024, help="static KV cache positions")
    ap.add_argument(
        "--attention",
        default="sdpa",
        choices=["sdpa", "triton"],
        help="sdpa: masked SDPA over the whole gathered cache; triton: decode attention up to each length",
    )
    add_smoke_flag(ap)
    args = ap.parse_args()
    preset = "qwen3-0.6b"
    if smoke(args):
        GRAPH_TIMING.update(steps=2, repeats=1)
        preset, args.batches, args.layers, args.prompt, args.max_seq_len = "tiny", "1,2", 1, 8, 128
    if args.prompt + (K + 1) * (GRAPH_TIMING["steps"] + 5) > args.max_seq_len:  # the timed steps' positions
        ap.error(f"--prompt {args.prompt} leaves too few cache positions for the timed steps; raise --max-seq-len")
    torch.manual_seed(0)
    batches = [int(b) for b in args.batches.split(",")]
    record = {
        "env": env_record(),
        "layers": args.layers,
        "K": K,
        "prompt_len": args.prompt,
        "max_seq_len": args.max_seq_len,
        "attention": args.attention,
        "results": {},
    }
    rows = [
        "| B | eager (ms) | eager, fused pieces (ms) | per-stage graphs + sync (ms) | step graph (ms) | device time (ms) | occupancy | host overhead (us) "
        "| vs eager | torch.compile r-o (ms) | vs compile | capture (ms) | spliced step graph (ms) | spliced device (ms) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for B in batches:
        setup = Setup(B, args.layers, max(B, 8) + 1, args.prompt, args.max_seq_len, args.attention, preset=preset)
        eager = mode_eager(setup)
        eager_fused = mode_eager_fused(setup)
        stages = mode_per_stage(setup)
        graph, device, capture_ms = mode_step_graph(setup)
        spliced, spliced_device = mode_spliced(setup)
        comp = (
            mode_compile(setup) if (B == 1 and not args.no_compile) else {"ms": None, "note": "not run (batch 1 only)"}
        )
        res = {
            "eager_ms": eager,
            "eager_fused_pieces_ms": eager_fused,
            "per_stage_ms": stages,
            "step_graph_ms": graph,
            "device_ms": device,
            "occupancy": device / graph,
            "host_overhead_us": (graph - device) * 1e3,
            "speedup_vs_eager": eager / graph,
            "compile": comp,
            "capture_ms": capture_ms,
            "spliced_ms": spliced,
            "spliced_device_ms": spliced_device,
        }
        if comp.get("ms"):
            res["speedup_vs_compile"] = comp["ms"] / graph
        record["results"][B] = res
        c = f"{comp['ms']:.3f} ({comp['compile_s']:.0f} s compile)" if comp.get("ms") else comp.get("error", "-")[:60]
        rows.append(
            f"| {B} | {eager:.3f} | {eager_fused:.3f} | {stages:.3f} | {graph:.3f} | {device:.3f} | {res['occupancy'] * 100:.1f}% | "
            f"{res['host_overhead_us']:.1f} | {res['speedup_vs_eager']:.2f}x | {c} | "
            f"{res.get('speedup_vs_compile', float('nan')):.2f}x | {capture_ms:.1f} | {spliced:.3f} | {spliced_device:.3f} |"
        )
        del setup
        if CUDA:
            torch.cuda.empty_cache()
    if not args.no_memory:
        mem = memory_keys(Setup(8, args.layers, 9, args.prompt, args.max_seq_len, args.attention, preset=preset))
        record["memory"] = mem
        rows.append("")
        rows.append(
            f"Keys 1..8 in one shared pool: {mem['shared_pool_bytes'] / 2**20:.1f} MiB; the largest key alone: "
            f"{mem['largest_alone_bytes'] / 2**20:.1f} MiB (ratio {mem['ratio_shared_to_largest']:.2f}); "
            f"capture per key (ms): {', '.join(f'{k} {v:.1f}' for k, v in mem['capture_ms_per_key'].items())}"
        )
    env = record["env"]
    header = (
        f"# Step benchmark, {env['date']}, {env['gpu']}, torch {env['torch']}, triton {env['triton']}\n\n"
        f"Example model at the Qwen3-0.6B shape ({args.layers} layers), bf16, K={K}, static KV cache of "
        f"{args.max_seq_len}, prompt {args.prompt} tokens, greedy; attention: "
        + (
            "masked SDPA over the whole gathered cache"
            if args.attention == "sdpa"
            else "decode attention up to each length"
        )
        + ".\n\n"
    )
    table = header + "\n".join(rows) + "\n"
    name = f"step_{args.layers}l" + ("" if args.max_seq_len == 1024 else f"_s{args.max_seq_len}")
    name += "" if args.attention == "sdpa" else f"_{args.attention}"
    _plot(record, args.out, name)
    save(args.out, name, record, table)


def _plot(record: dict, out: str, name: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    res = record["results"]
    bs = sorted(res)
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (
        ("eager_ms", "eager"),
        ("per_stage_ms", "per-stage graphs"),
        ("step_graph_ms", "step graph"),
        ("device_ms", "device time"),
    ):
        ax.plot(bs, [res[b][key] for b in bs], marker="o", label=label)
    ax.set_xlabel("batch size")
    ax.set_ylabel("ms per step")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title(f"chain step, {record['layers']} layers, K={K}")
    from pathlib import Path

    Path(out).mkdir(parents=True, exist_ok=True)
    fig.savefig(Path(out) / f"{name}.png", dpi=120, bbox_inches="tight")


if __name__ == "__main__":
    main()
