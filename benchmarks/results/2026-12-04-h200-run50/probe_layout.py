"""Every sampling class's verify per instance with 20 in one CUDA graph (bf16 logits ``randn``, V = 151,936,
K = 3, temperature 0.8) under a split layout that aims at ``PROBE_TARGET`` programs in all (528 now: about
four an SM of an H200): ``PROBE_TARGET=1056 python probe_layout.py LABEL``. A case of several settings gives
request ``b`` the setting ``b % n``; settings are ``(top_k, top_p, min_p)``."""

import os
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from _timing import per_instance_us  # noqa: E402

from stepgraph.kernels import chain_sampling  # noqa: E402
from stepgraph.kernels._sampling_filter import BLOCK  # noqa: E402
from stepgraph.kernels.chain_sampling import chain_verify_sampling  # noqa: E402

K, V = 3, 151_936
target = int(os.environ.get("PROBE_TARGET", 528))


def layout(rows, vocab):
    per_row = max(min(32, max(8, triton.cdiv(target, max(rows, 1)))), triton.cdiv(vocab, 255 * BLOCK))
    split = triton.cdiv(triton.cdiv(vocab, per_row), BLOCK) * BLOCK
    return triton.cdiv(vocab, split), split


chain_sampling.split_layout = layout
TEMP = {"filtered": False}
TOP_P = {"filtered": True, "pivot": True}
TOP_K = {"filtered": True, "small_top_k": True}
GENERAL = {"filtered": True}
CASES = {
    "temperature": (TEMP, [(0, 1.0, 0.0)]),
    "top-k 50 + top-p 0.9": (TOP_K, [(50, 0.9, 0.0)]),
    "top-k 1000": (TOP_K, [(1000, 1.0, 0.0)]),
    "top-p 0.9": (TOP_P, [(0, 0.9, 0.0)]),
    "mix top-k 50 + top-p 0.9 / top-p 0.9": (TOP_P, [(50, 0.9, 0.0), (0, 0.9, 0.0)]),
    "min-p 0.1": (GENERAL, [(0, 1.0, 0.1)]),
    "top-k 2000 + top-p 0.9 (general)": (GENERAL, [(2000, 0.9, 0.0)]),
}
label = sys.argv[1]
for B in (1, 8, 16, 64):
    for name, (mode, settings) in CASES.items():
        torch.manual_seed(0)
        x = torch.randn(B, K + 1, V, device="cuda").bfloat16()
        d = torch.argmax(x, -1)[:, :K].contiguous()
        k, p, mp = (torch.tensor([settings[b % len(settings)][i] for b in range(B)], device="cuda") for i in range(3))
        args = (x, d, torch.full((B,), 0.8, device="cuda"), k, p.float(), torch.arange(B, device="cuda"),
                torch.zeros(B, dtype=torch.int64, device="cuda"))  # fmt: skip
        us = per_instance_us(lambda: chain_verify_sampling(*args, min_p=mp.float(), **mode))
        print(f"{label:6s} B={B:2d} {name:40s} {us:8.1f} us  layout {layout(B * (K + 1), V)}", flush=True)
