"""Device time of each launch of one sampled verify (torch.profiler), in launch order, averaged over calls
(run 48's probe_launches_mixed.py with other cases): top-k 50 + top-p 0.9 in the top_k class, and requests
taking turns between top-k 50 + top-p 0.9 and top-p 0.9 (the top_p class). Logits bf16 randn, temperature
0.8, K = 3. ``python probe_launches.py LABEL 1,8``."""

import sys

import torch
from torch.profiler import ProfilerActivity, profile

from stepgraph.kernels.chain_sampling import chain_verify_sampling

K, V, CALLS = 3, 151_936, 20
CASES = {  # name: (top_k taken in turns, top_p, class keywords)
    "top-k 50 + top-p 0.9, top_k class": ((50,), 0.9, {"filtered": True, "small_top_k": True}),
    "mix": ((50, 0), 0.9, {"filtered": True, "pivot": True}),
}
label = sys.argv[1]

for B in [int(b) for b in sys.argv[2].split(",")]:
    for name, (k, p, mode) in CASES.items():
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(B, K + 1, V, device="cuda", generator=g).bfloat16()
        d = torch.argmax(x, -1)[:, :K].contiguous()
        T = torch.full((B,), 0.8, device="cuda")
        tk = torch.tensor([k[b % len(k)] for b in range(B)], device="cuda", dtype=torch.int64)
        tp = torch.full((B,), p, device="cuda")
        mpv = torch.zeros(B, device="cuda")
        seed = torch.arange(B, device="cuda", dtype=torch.int64)
        off = torch.zeros(B, device="cuda", dtype=torch.int64)

        def call():
            return chain_verify_sampling(x, d, T, tk, tp, seed, off, min_p=mpv, **mode)

        for _ in range(3):
            call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(CALLS):
                call()
            torch.cuda.synchronize()
        ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        ev.sort(key=lambda e: e.time_range.start)
        per_call = len(ev) // CALLS
        print(f"\n## {label} B={B} {name}: {sum(e.device_time for e in ev) / CALLS:.1f} us of kernels per call")
        for i in range(per_call):
            ts = sorted(ev[c * per_call + i].device_time for c in range(CALLS))
            print(f"  {i:2d} {ev[i].name[:28]:28s} mean {sum(ts) / CALLS:7.2f}  min {ts[0]:7.2f}  max {ts[-1]:7.2f}")
