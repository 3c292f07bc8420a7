"""probe_lists.py's cases for one package, with a check: each case's tokens at B = 8 against the torch
reference's (same seeds). ``python probe_variants.py LABEL``; run with a variant package first on
``PYTHONPATH``."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from _timing import per_instance_us  # noqa: E402

from stepgraph.kernels.chain_sampling import chain_verify_sampling, chain_verify_sampling_ref  # noqa: E402

K, V = 3, 151_936
TOP_P = {"filtered": True, "pivot": True}
TOP_K = {"filtered": True, "small_top_k": True}
CASES = {  # name: (class options, [(top_k, top_p), ...] taken in turns)
    "top-k 50 + top-p 0.9, top_k class": (TOP_K, [(50, 0.9)]),
    "top-k 1000, top_k class": (TOP_K, [(1000, 1.0)]),
    "mix top-k 50 + top-p 0.9 / top-p 0.9": (TOP_P, [(50, 0.9), (0, 0.9)]),
    "top-k 1000, top_p class": (TOP_P, [(1000, 1.0)]),
    "top-p 0.9": (TOP_P, [(0, 0.9)]),
}
label = sys.argv[1]
for B in (1, 8, 64):
    for name, (mode, settings) in CASES.items():
        torch.manual_seed(0)
        x = torch.randn(B, K + 1, V, device="cuda").bfloat16()
        d = torch.argmax(x, -1)[:, :K].contiguous()
        k = torch.tensor([settings[b % len(settings)][0] for b in range(B)], device="cuda")
        p = torch.tensor([settings[b % len(settings)][1] for b in range(B)], device="cuda")
        args = (x, d, torch.full((B,), 0.8, device="cuda"), k, p, torch.arange(B, device="cuda"),
                torch.zeros(B, dtype=torch.int64, device="cuda"))  # fmt: skip
        check = ""
        if B == 8:
            got = chain_verify_sampling(*args[:-1], args[-1].clone(), **mode).tokens
            ref = chain_verify_sampling_ref(*args[:-1], args[-1].clone(), **mode).tokens
            check = "tokens ok" if torch.equal(got, ref) else "TOKENS DIFFER"
        us = per_instance_us(lambda: chain_verify_sampling(*args, **mode))
        print(f"{label:6s} B={B:2d} {name:44s} {us:8.1f} us {check}", flush=True)
