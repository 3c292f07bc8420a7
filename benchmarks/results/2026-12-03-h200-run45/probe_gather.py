"""Launch 3 (the gather) and launch 4 (the per-row cut) of the small top-k class, by device time per call
(torch.profiler, mean of 20 calls), for steps of ``GATHER_BLOCK`` entries with ``GATHER_WARPS`` warps.
Logits bf16 randn, temperature 0.8, K = 3. Runs with ``gather_block.patch`` applied (the settings are
the patch's). ``python probe_gather.py 1024x4 2048x4 4096x8``."""

import sys

import torch
from torch.profiler import ProfilerActivity, profile

from stepgraph.kernels import _sampling_topk
from stepgraph.kernels.chain_sampling import chain_verify_sampling

K, V, CALLS = 3, 151_936, 20
CASES = {"top-k 1000": (1000, 1.0), "top-k 1000 + top-p 0.9": (1000, 0.9), "top-k 50 + top-p 0.9": (50, 0.9)}

for config in sys.argv[1:]:
    block, warps = (int(v) for v in config.split("x"))
    _sampling_topk.GATHER_BLOCK, _sampling_topk.GATHER_WARPS = block, warps
    for B in (1, 8, 64):
        for name, (k, p) in CASES.items():
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
            per = {n: sum(e.device_time for e in ev if e.name.startswith(n)) / CALLS
                   for n in ("_gather_kernel", "_cut_kernel")}  # fmt: skip
            total = sum(e.device_time for e in ev) / CALLS
            print(f"{config:7s} B={B:2d} {name:24s} gather {per['_gather_kernel']:7.2f}  cut {per['_cut_kernel']:7.2f}"
                  f"  all {total:7.2f} us", flush=True)  # fmt: skip
