"""Splits per row at B = 32 and 64: per-instance us of sampled verify (20 in one graph), bf16 randn, K = 3,
temperature 0.8, for the general case, top-p alone, top-k 50 + top-p 0.9 and temperature alone, with the
split layout forced to n splits per row (0: the default).
``python benchmarks/results/2026-12-04-h200-run54/call5_splits/probe_splits.py`` from the repository root."""
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from _timing import per_instance_us  # noqa: E402

from stepgraph.kernels import chain_sampling  # noqa: E402
from stepgraph.kernels._sampling_filter import BLOCK  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
K, V = 3, (151_936 if DEV == "cuda" else 3000)
default = chain_sampling.split_layout
PIVOT = {"filtered": True, "pivot": True}
CASES = {
    "general k2000 p0.9": (2000, 0.9, 0.8, PIVOT),
    "top-p 0.9": (0, 0.9, 0.8, PIVOT),
    "top-k 50 + top-p 0.9": (50, 0.9, 0.8, {"filtered": True, "small_top_k": True}),
    "temperature 0.8": (0, 1.0, 0.8, {"filtered": False}),
}


def forced(n):
    def layout(rows, vocab):
        split = triton.cdiv(triton.cdiv(vocab, n), BLOCK) * BLOCK
        return triton.cdiv(vocab, split), split
    return layout


def inputs(B, k, p, t):
    torch.manual_seed(0)
    x = torch.randn(B, K + 1, V, device=DEV).bfloat16()
    d = torch.argmax(x, -1)[:, :K].contiguous()
    return (x, d, torch.full((B,), t, device=DEV), torch.full((B,), k, dtype=torch.int64, device=DEV),
            torch.full((B,), p, device=DEV), torch.arange(B, device=DEV),
            torch.zeros(B, dtype=torch.int64, device=DEV))


PLAN = ((64, (0, 5, 6, 10, 12)), (32, (0, 5, 6))) if DEV == "cuda" else ((1, (0, 2)),)
for B, ns in PLAN:
    for n in ns:
        chain_sampling.split_layout = default if n == 0 else forced(n)
        row = []
        for name, (k, p, t, mode) in CASES.items():
            args = inputs(B, k, p, t)
            us = per_instance_us(lambda args=args, mode=mode: chain_sampling.chain_verify_sampling(*args, **mode))
            row.append(f"{name} {us:7.1f}")
        lay = chain_sampling.split_layout(B * (K + 1), V)
        print(f"B={B:2d} splits {'default' if n == 0 else n} {lay}: " + " | ".join(row), flush=True)
