"""Overlapped decode loop against the synchronous one (issue: the host runs one step ahead).

For B in {1, 8} on the example model (Qwen3-0.6B shape by default), each with and without a deliberately
slow host side (about 200 us of Python scheduling work per step): decode time per step, device time per
step (CUDA events around each step of the loop), occupancy (device time / step time), host time per step,
and where the device idled (the gaps between one step's end and the next one's start).

    python benchmarks/bench_overlap.py --out benchmarks/results/<dir> [--layers 28]
"""

from __future__ import annotations

import argparse
import time

import torch
from _timing import add_smoke_flag, elapsed_ms, env_record, example_models, save, smoke, sync

from stepgraph import RunnerConfig, Toggles
from stepgraph.sampling import SamplingParams
from stepgraph.speculative.decoder import SpecDecoder

K = 3


def slow_host(us: float):
    def work(_batch: int) -> None:  # stands in for a scheduler's Python work
        end = time.perf_counter() + us * 1e-6
        x = 0
        while time.perf_counter() < end:
            x += 1

    return work


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/latest")
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--tokens", type=int, default=160)
    add_smoke_flag(ap)
    args = ap.parse_args()
    batches = (1, 8)
    if smoke(args):
        args.tokens, batches = 6, (1, 2)
    target, draft = example_models(num_layers=args.layers, max_requests=20)
    vocab = target.cfg.vocab_size
    record = {"env": env_record(), "layers": args.layers, "results": {}}
    rows = [
        "| B | host work | loop | ms / step | device ms / step | occupancy | host ms / step | steps | replay-only device ms "
        "| device idle between steps (ms, total) | largest gaps (ms @ step) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    g = torch.Generator().manual_seed(0)
    for B in batches:
        prompts = [torch.randint(0, vocab, (64,), generator=g).tolist() for _ in range(B)]
        dec = SpecDecoder.for_example(
            target,
            draft,
            num_draft_tokens=K,
            max_batch=B,
            config=RunnerConfig(toggles=Toggles.all(True), progress=False),
        )
        dec.warmup(B)
        dec.generate(prompts, max_new_tokens=16)  # warm everything
        replay_ms = dec.device_step_ms(B) if torch.cuda.is_available() else float("nan")  # replays alone
        dec.record_step_events = True
        for host_us in (0, 200):
            for overlap in (False, True):
                dec.stats = type(dec.stats)()
                dec.step_events.clear()
                sync()
                out = dec.generate(
                    prompts,
                    max_new_tokens=args.tokens,
                    sampling=SamplingParams(),
                    overlap=overlap,
                    on_step=slow_host(host_us) if host_us else None,
                )
                st = dec.stats
                step_ms = st.decode_seconds / st.steps * 1e3
                ev = dec.step_events
                times = elapsed_ms(ev)
                device_ms = sum(times) / len(times) if times else float("nan")
                gaps = [(ev[i - 1][1].elapsed_time(ev[i][0]), i) for i in range(1, len(ev))]
                idle = sorted(gaps, reverse=True)
                res = {
                    "step_ms": step_ms,
                    "device_ms": device_ms,
                    "replay_only_device_ms": replay_ms,
                    "idle_between_steps_ms": sum(g for g, _ in gaps),
                    "largest_gaps_ms_at_step": [(round(g, 3), i) for g, i in idle[:5]],
                    "occupancy": min(1.0, device_ms / step_ms),
                    "host_ms": max(0.0, step_ms - device_ms),
                    "steps": st.steps,
                    "discarded_steps": st.discarded_steps,
                    "tokens": sum(len(o) for o in out),
                }
                record["results"][f"B={B} host={host_us}us overlap={overlap}"] = res
                rows.append(
                    f"| {B} | {host_us} us | {'overlapped' if overlap else 'synchronous'} | {step_ms:.3f} | {res['device_ms']:.3f} | "
                    f"{res['occupancy'] * 100:.2f}% | {res['host_ms']:.3f} | {st.steps} | {replay_ms:.3f} | "
                    f"{res['idle_between_steps_ms']:.2f} | {', '.join(f'{g:.3f} @ {i}' for g, i in idle[:3])} |"
                )
    env = record["env"]
    header = (
        f"# Overlapped decode loop, {env['date']}, {env['gpu']}, torch {env['torch']}, triton {env['triton']}\n\n"
        f"Example model at the Qwen3-0.6B shape ({args.layers} layers), bf16, K={K}, greedy, {args.tokens} new tokens "
        "per request. Device time = the steps' summed GPU time (CUDA events around each step); occupancy = device time / "
        "decode wall time (prefill excluded). Replay-only = back-to-back replays of the full batch's graph.\n\n"
    )
    save(args.out, f"overlap_{args.layers}l", record, header + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
