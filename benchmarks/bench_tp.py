"""Tensor-parallel step on two GPUs: one packed broadcast of the verify result vs one per field vs none.

Each rank holds the example model (replicated); the step graph contains the broadcast (NCCL). Step time =
back-to-back replays of the captured key on each rank.

    python benchmarks/bench_tp.py --out benchmarks/results/<dir> [--layers 28]
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
from pathlib import Path

import torch.multiprocessing as mp
from _timing import CUDA, add_smoke_flag, env_record, save, smoke

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: the TP test harness
from tests.tp_worker import worker  # noqa: E402


def port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results/latest")
    ap.add_argument("--layers", type=int, default=28)
    add_smoke_flag(ap)
    args = ap.parse_args()
    backend, preset, batches, tokens = "nccl", "qwen3-0.6b", (1, 8), 24
    if smoke(args) or not CUDA:  # gloo on the CPU: the same ranks, no step graph
        backend, preset, batches, tokens, args.layers = ("nccl" if CUDA else "gloo"), "tiny", (1,), 4, 1
    record = {"env": env_record(), "layers": args.layers, "results": {}}
    rows = ["| B | broadcast | step ms (rank 0) | step ms (rank 1) | ranks agree |", "| --- | --- | --- | --- | --- |"]
    for B in batches:
        for label, opts in (
            ("one packed", {"packed": True}),
            ("one per field", {"packed": False}),
            ("none", {"tp": False}),
        ):
            with tempfile.TemporaryDirectory() as tmp:
                o = {
                    "backend": backend, "preset": preset, "batch": B, "requests": B, "max_new_tokens": tokens,
                    "overrides": {"num_layers": args.layers, "max_requests": 9}, "time_steps": CUDA, **opts,
                }  # fmt: skip
                mp.spawn(worker, args=(2, port(), tmp, o), nprocs=2, join=True)
                r = [json.loads(Path(tmp, f"rank{i}.json").read_text()) for i in range(2)]
            agree = r[0]["outputs"] == r[1]["outputs"]
            ms = [x.get("step_ms", float("nan")) for x in r]  # device time of a step: only with CUDA graphs
            record["results"][f"B={B} {label}"] = {
                "step_ms": ms,
                "agree": agree,
                "broadcasts": r[0]["broadcasts"],
            }
            rows.append(f"| {B} | {label} | {ms[0]:.3f} | {ms[1]:.3f} | {agree} |")
    env = record["env"]
    header = f"# TP=2 step, {env['date']}, 2x {env['gpu']}, torch {env['torch']}, triton {env['triton']}\n\nExample model, Qwen3-0.6B shape ({args.layers} layers, replicated on both ranks), bf16, K=3.\n\n"
    save(args.out, f"tp2_{args.layers}l", record, header + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
