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
from _timing import env_record, save

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
    args = ap.parse_args()
    record = {"env": env_record(), "layers": args.layers, "results": {}}
    rows = ["| B | broadcast | step ms (rank 0) | step ms (rank 1) | ranks agree |", "| --- | --- | --- | --- | --- |"]
    for B in (1, 8):
        for label, opts in (
            ("one packed", {"packed": True}),
            ("one per field", {"packed": False}),
            ("none", {"tp": False}),
        ):
            with tempfile.TemporaryDirectory() as tmp:
                o = {
                    "backend": "nccl", "preset": "qwen3-0.6b", "batch": B, "requests": B, "max_new_tokens": 24,
                    "overrides": {"num_layers": args.layers, "max_requests": 9}, "time_steps": True, **opts,
                }  # fmt: skip
                mp.spawn(worker, args=(2, port(), tmp, o), nprocs=2, join=True)
                r = [json.loads(Path(tmp, f"rank{i}.json").read_text()) for i in range(2)]
            agree = r[0]["outputs"] == r[1]["outputs"]
            record["results"][f"B={B} {label}"] = {
                "step_ms": [r[0]["step_ms"], r[1]["step_ms"]],
                "agree": agree,
                "broadcasts": r[0]["broadcasts"],
            }
            rows.append(f"| {B} | {label} | {r[0]['step_ms']:.3f} | {r[1]['step_ms']:.3f} | {agree} |")
    env = record["env"]
    header = f"# TP=2 step, {env['date']}, 2x {env['gpu']}, torch {env['torch']}, triton {env['triton']}\n\nExample model, Qwen3-0.6B shape ({args.layers} layers, replicated on both ranks), bf16, K=3.\n\n"
    save(args.out, f"tp2_{args.layers}l", record, header + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
