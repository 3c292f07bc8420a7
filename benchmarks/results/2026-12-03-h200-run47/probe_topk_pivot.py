"""A top-k above 1024 without top-p, per instance with 20 in one CUDA graph (the `top_p` class's kernels:
``filtered=True, pivot=True``): with the code before this run such a request takes the cut-off rounds, after
it the pivot's draws. ``python probe_topk_pivot.py LABEL``."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from _timing import per_instance_us  # noqa: E402

from stepgraph.kernels.chain_sampling import chain_verify_sampling  # noqa: E402

K, V = 3, 151_936
CASES = {"top-k 2000": (2000, 0.0, 1.0), "top-k 2000 peaked": (2000, 0.0, 4.0), "top-k 20000": (20000, 0.0, 1.0),
         "top-k 2000 + min-p 0.05": (2000, 0.05, 1.0)}  # fmt: skip
label = sys.argv[1]
for B in (1, 8, 64):
    for name, (k, mp, scale) in CASES.items():
        torch.manual_seed(0)
        x = (torch.randn(B, K + 1, V, device="cuda") * scale).bfloat16()
        d = torch.argmax(x, -1)[:, :K].contiguous()
        args = (x, d, torch.full((B,), 0.8, device="cuda"), torch.full((B,), k, dtype=torch.int64, device="cuda"),
                torch.ones(B, device="cuda"), torch.arange(B, device="cuda"),
                torch.zeros(B, dtype=torch.int64, device="cuda"))  # fmt: skip
        mpv = torch.full((B,), mp, device="cuda")
        us = per_instance_us(lambda: chain_verify_sampling(*args, min_p=mpv, filtered=True, pivot=True))
        print(f"{label:10s} B={B:2d} {name:24s} {us:8.1f} us", flush=True)
