"""Registers, spills and shared memory of the round kernel's variants as compiled on the device, after one
top_p-class verify at B = 1 / 8 / 64 (bf16, V = 151,936, K = 3). ``python probe_regs.py LABEL``."""

import sys

import torch

from stepgraph.kernels import _sampling_mass
from stepgraph.kernels.chain_sampling import chain_verify_sampling

K, V = 3, 151_936
for B in (1, 8, 64):
    x = torch.randn(B, K + 1, V, device="cuda").bfloat16()
    d = torch.argmax(x, -1)[:, :K].contiguous()
    chain_verify_sampling(x, d, torch.full((B,), 0.8, device="cuda"), torch.zeros(B, dtype=torch.int64, device="cuda"),
                          torch.full((B,), 0.9, device="cuda"), torch.arange(B, device="cuda"),
                          torch.zeros(B, dtype=torch.int64, device="cuda"), filtered=True, pivot=True)  # fmt: skip
torch.cuda.synchronize()
for cache in _sampling_mass._round_kernel.device_caches.values():
    for kernel in cache[0].values():
        kernel._init_handles()
        c = kernel.src.constants if hasattr(kernel, "src") else {}
        print(f"{sys.argv[1]:6s} round kernel: regs {kernel.n_regs} spills {kernel.n_spills} "
              f"shared {kernel.metadata.shared} {c}")  # fmt: skip
