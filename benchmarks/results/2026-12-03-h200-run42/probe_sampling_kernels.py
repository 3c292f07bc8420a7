"""Per-kernel device time of one sampled verify (torch.profiler), per class and batch size: where a class's
time goes. Logits as bench_kernels.py makes them (bf16 randn, temperature 0.8), K = 3, V = 151,936."""

import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from stepgraph.kernels.chain_sampling import chain_verify_sampling

K, V, CALLS = 3, 151_936, 20
CASES = {  # name: (top_k, top_p, min_p, class keywords)
    "top-p 0.9 (top_p class)": (0, 0.9, 0.0, {"filtered": True, "pivot": True}),
    "top-k 1000 (top_k_top_p class)": (1000, 1.0, 0.0, {"filtered": True}),
    "top-k 1000 + top-p 0.9 (top_k_top_p class)": (1000, 0.9, 0.0, {"filtered": True}),
    "min-p 0.1 (top_k_top_p class)": (0, 1.0, 0.1, {"filtered": True}),
    "top-k 50 (top_k class)": (50, 1.0, 0.0, {"small_top_k": True}),
}

for B in [int(b) for b in sys.argv[1].split(",")]:
    for name, (k, p, mp, kw) in CASES.items():
        x = torch.randn(B, K + 1, V, device="cuda").bfloat16()
        d = torch.argmax(x, -1)[:, :K].contiguous()
        T = torch.full((B,), 0.8, device="cuda")
        tk = torch.full((B,), k, device="cuda", dtype=torch.int64)
        tp = torch.full((B,), p, device="cuda")
        mpv = torch.full((B,), mp, device="cuda")
        seed = torch.arange(B, device="cuda", dtype=torch.int64)
        off = torch.zeros(B, device="cuda", dtype=torch.int64)

        def call():
            return chain_verify_sampling(x, d, T, tk, tp, seed, off, min_p=mpv, **kw)

        for _ in range(3):
            call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(CALLS):
                call()
            torch.cuda.synchronize()
        per = defaultdict(lambda: [0, 0.0])
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                per[e.name][0] += 1
                per[e.name][1] += e.device_time
        total = sum(v[1] for v in per.values()) / CALLS
        print(f"\n## B={B} {name}: {total:.1f} us of kernels per call")
        for n, (c, t) in sorted(per.items(), key=lambda kv: -kv[1][1]):
            print(f"  {t / CALLS:8.2f} us  x{c / CALLS:.0f}  {n[:70]}")
