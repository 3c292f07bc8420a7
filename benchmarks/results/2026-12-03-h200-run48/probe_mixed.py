"""Sampled verify per instance with 20 in one CUDA graph (bf16 logits ``S * randn``, V = 151,936, K = 3,
temperature 0.8) for batches whose requests take turns between settings: ``python probe_mixed.py LABEL``.
Each case names its class's kernel options; a case of several settings gives request ``b`` the setting
``b % n``."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from _timing import per_instance_us  # noqa: E402

from stepgraph.kernels.chain_sampling import chain_verify_sampling  # noqa: E402

K, V = 3, 151_936
TOP_P = {"filtered": True, "pivot": True}
TOP_K = {"filtered": True, "small_top_k": True}
GENERAL = {"filtered": True}
#: name: (class options, [(top_k, top_p), ...] taken in turns, logit scale S)
CASES = {
    "top-k 50 + top-p 0.9, top_k class": (TOP_K, [(50, 0.9)], 1.0),
    "top-k 50 + top-p 0.9, top_p class": (TOP_P, [(50, 0.9)], 1.0),
    "top-k 50 + top-p 0.9, general class": (GENERAL, [(50, 0.9)], 1.0),
    "mix top-k 50 + top-p 0.9 / top-p 0.9": (TOP_P, [(50, 0.9), (0, 0.9)], 1.0),
    "mix top-k 20 + top-p 0.8 / top-p 0.9 / temp": (TOP_P, [(20, 0.8), (0, 0.9), (0, 1.0)], 1.0),
    "mix, peaked (S = 4)": (TOP_P, [(50, 0.9), (0, 0.9)], 4.0),
    "top-k 1000, top_p class": (TOP_P, [(1000, 1.0)], 1.0),
    "top-p 0.9": (TOP_P, [(0, 0.9)], 1.0),
    "top-p 0.5": (TOP_P, [(0, 0.5)], 1.0),
}
label = sys.argv[1]
for B in (1, 8, 64):
    for name, (mode, settings, scale) in CASES.items():
        torch.manual_seed(0)
        x = (torch.randn(B, K + 1, V, device="cuda") * scale).bfloat16()
        d = torch.argmax(x, -1)[:, :K].contiguous()
        k = torch.tensor([settings[b % len(settings)][0] for b in range(B)], device="cuda")
        p = torch.tensor([settings[b % len(settings)][1] for b in range(B)], device="cuda")
        args = (x, d, torch.full((B,), 0.8, device="cuda"), k, p, torch.arange(B, device="cuda"),
                torch.zeros(B, dtype=torch.int64, device="cuda"))  # fmt: skip
        us = per_instance_us(lambda: chain_verify_sampling(*args, **mode))
        print(f"{label:6s} B={B:2d} {name:44s} {us:8.1f} us", flush=True)
