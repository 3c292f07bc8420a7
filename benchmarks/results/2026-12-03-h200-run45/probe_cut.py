"""Launch 4 of the small top-k class (``_cut_kernel``, one program per row) by device time per call
(torch.profiler, mean of 20 calls) under module settings given as NAME=VALUE (``P_PROBES``, keys tried at
once by its searches; ``CUT_WARPS``; ``CUT_REGISTERS``). One setting a process: the kernels read
``P_PROBES`` when they compile. Logits bf16 randn, temperature 0.8, K = 3.
``python probe_cut.py P_PROBES=4 CUT_WARPS=4``."""

import sys

import torch
import triton.language as tl
from torch.profiler import ProfilerActivity, profile

from stepgraph.kernels import _sampling_topk
from stepgraph.kernels.chain_sampling import chain_verify_sampling

K, V, CALLS = 3, 151_936, 20
CASES = {"top-k 1000": (1000, 1.0), "top-k 1000 + top-p 0.9": (1000, 0.9), "top-k 50 + top-p 0.9": (50, 0.9)}

for setting in sys.argv[1:]:
    name, value = setting.split("=")
    setattr(_sampling_topk, name, tl.constexpr(int(value)) if name == "P_PROBES" else int(value))
label = " ".join(sys.argv[1:]) or "as committed"
for B in (1, 8, 64):
    for case, (k, p) in CASES.items():
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(B, K + 1, V, device="cuda", generator=g).bfloat16()
        d = torch.argmax(x, -1)[:, :K].contiguous()
        T = torch.full((B,), 0.8, device="cuda")
        tk = torch.full((B,), k, device="cuda", dtype=torch.int64)
        tp = torch.full((B,), p, device="cuda")
        seed = torch.arange(B, device="cuda", dtype=torch.int64)
        off = torch.zeros(B, device="cuda", dtype=torch.int64)

        def call():
            return chain_verify_sampling(x, d, T, tk, tp, seed, off, small_top_k=True)

        for _ in range(3):
            call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(CALLS):
                call()
            torch.cuda.synchronize()
        ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        cut = sum(e.device_time for e in ev if e.name.startswith("_cut_kernel")) / CALLS
        print(f"{label:32s} B={B:2d} {case:24s} cut {cut:7.2f} us", flush=True)
