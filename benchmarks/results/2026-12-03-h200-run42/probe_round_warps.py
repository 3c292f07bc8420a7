"""The general class's cut-off rounds under 4 and 8 warps: a sampled verify of top-k 1000 (with and without
top-p 0.9) and of min-p 0.1, per instance in a CUDA graph (triton.testing.do_bench_cudagraph), at
B = 1 / 8 / 64. Logits as bench_kernels.py makes them (bf16 randn, temperature 0.8), K = 3."""

import torch
from triton.testing import do_bench_cudagraph

from stepgraph.kernels import _sampling_mass
from stepgraph.kernels.chain_sampling import chain_verify_sampling

K, V = 3, 151_936
CASES = {"top-k 1000": (1000, 1.0, 0.0), "top-k 1000 + top-p 0.9": (1000, 0.9, 0.0), "min-p 0.1": (0, 1.0, 0.1)}

for warps in (4, 8):
    _sampling_mass.NUM_WARPS = warps
    for B in (1, 8, 64):
        for name, (k, p, mp) in CASES.items():
            x = torch.randn(B, K + 1, V, device="cuda").bfloat16()
            d = torch.argmax(x, -1)[:, :K].contiguous()
            args = (x, d, torch.full((B,), 0.8, device="cuda"), torch.full((B,), k, device="cuda"),
                    torch.full((B,), p, device="cuda"), torch.arange(B, device="cuda"),
                    torch.zeros(B, dtype=torch.int64, device="cuda"))  # fmt: skip
            mpv = torch.full((B,), mp, device="cuda")
            us = 1e3 * do_bench_cudagraph(lambda: chain_verify_sampling(*args, min_p=mpv, filtered=True), rep=200)
            print(f"warps {warps} B={B:2d} {name:24s} {us:8.1f} us", flush=True)
