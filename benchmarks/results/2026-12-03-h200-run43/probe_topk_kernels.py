"""Per-kernel device time of the small top-k class's sampled verify (torch.profiler, 20 calls), at the
given batch sizes: where its time goes. Logits as bench_kernels.py makes them (bf16 randn, temperature
0.8), K = 3, V = 151,936. ``python probe_topk_kernels.py LABEL 1,64``."""

import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from stepgraph.kernels import _sampling_topk
from stepgraph.kernels.chain_sampling import chain_verify_sampling

K, V, CALLS = 3, 151_936, 20
CASES = {"top-k 50 + top-p 0.9": (50, 0.9), "top-k 1000": (1000, 1.0)}

for B in [int(b) for b in sys.argv[2].split(",")]:
    for name, (k, p) in CASES.items():
        if k > _sampling_topk.TOP_K_MAX:
            continue
        x = torch.randn(B, K + 1, V, device="cuda").bfloat16()
        d = torch.argmax(x, -1)[:, :K].contiguous()
        args = (x, d, torch.full((B,), 0.8, device="cuda"), torch.full((B,), k, device="cuda"),
                torch.full((B,), p, device="cuda"), torch.arange(B, device="cuda"),
                torch.zeros(B, dtype=torch.int64, device="cuda"))  # fmt: skip

        def call():
            return chain_verify_sampling(*args, filtered=True, small_top_k=True)

        for _ in range(3):
            call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(CALLS):
                call()
            torch.cuda.synchronize()
        per = defaultdict(float)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                per[e.name] += e.device_time / CALLS
        print(f"\n## {sys.argv[1]} B={B} {name}: {sum(per.values()):.1f} us of kernels per call")
        for n, t in sorted(per.items(), key=lambda kv: -kv[1]):
            print(f"  {t:8.2f} us  {n[:60]}")
