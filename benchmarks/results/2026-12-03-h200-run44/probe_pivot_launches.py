"""Device time of each launch of one top_p-class verify (torch.profiler), in launch order, averaged over
calls: which of the cut-off rounds' launches the pivot draws spend their time in. Logits bf16 randn times
a scale (1: flat rows, as bench_kernels.py makes them; 4: peaked ones), temperature 0.8, K = 3."""

import sys

import torch
from torch.profiler import ProfilerActivity, profile

from stepgraph.kernels.chain_sampling import chain_verify_sampling

K, V, CALLS = 3, 151_936, 20

for B in [int(b) for b in sys.argv[1].split(",")]:
    for scale in (1.0, 4.0):
        g = torch.Generator(device="cuda").manual_seed(0)
        x = (torch.randn(B, K + 1, V, device="cuda", generator=g) * scale).bfloat16()
        d = torch.argmax(x, -1)[:, :K].contiguous()
        T = torch.full((B,), 0.8, device="cuda")
        tk = torch.zeros(B, device="cuda", dtype=torch.int64)
        tp = torch.full((B,), 0.9, device="cuda")
        mpv = torch.zeros(B, device="cuda")
        seed = torch.arange(B, device="cuda", dtype=torch.int64)
        off = torch.zeros(B, device="cuda", dtype=torch.int64)

        def call():
            return chain_verify_sampling(x, d, T, tk, tp, seed, off, min_p=mpv, filtered=True, pivot=True)

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
        print(f"\n## B={B} scale {scale}: {sum(e.device_time for e in ev) / CALLS:.1f} us of kernels per call")
        for i in range(per_call):
            ts = [ev[c * per_call + i].device_time for c in range(CALLS)]
            ts.sort()
            print(f"  {i:2d} {ev[i].name[:28]:28s} mean {sum(ts) / CALLS:7.2f}  min {ts[0]:7.2f}  max {ts[-1]:7.2f}")
