"""Registers, spills and shared memory of the top_p class kernels (the stats launch that makes the first
draw, and the round kernel) as compiled on the device, after one top_p-class verify at B = 1 / 8 / 64 (bf16,
V = 151,936, K = 3). ``python probe_regs.py LABEL``."""

import sys

import torch

from stepgraph.kernels import _sampling_mass, _sampling_pivot
from stepgraph.kernels.chain_sampling import chain_verify_sampling

K, V = 3, 151_936
for B in (1, 8, 64):
    x = torch.randn(B, K + 1, V, device="cuda").bfloat16()
    d = torch.argmax(x, -1)[:, :K].contiguous()
    chain_verify_sampling(x, d, torch.full((B,), 0.8, device="cuda"), torch.tensor([50, 0] * B, device="cuda")[:B],
                          torch.full((B,), 0.9, device="cuda"), torch.arange(B, device="cuda"),
                          torch.zeros(B, dtype=torch.int64, device="cuda"), filtered=True, pivot=True)  # fmt: skip
torch.cuda.synchronize()
for name, fn in (("stats", getattr(_sampling_pivot, "_stats_kernel", None)), ("round", _sampling_mass._round_kernel)):
    if fn is None:
        continue
    for cache in fn.device_caches.values():
        for kernel in cache[0].values():
            kernel._init_handles()
            print(f"{sys.argv[1]:6s} {name} kernel: regs {kernel.n_regs} spills {kernel.n_spills} "
                  f"shared {kernel.metadata.shared}")  # fmt: skip
