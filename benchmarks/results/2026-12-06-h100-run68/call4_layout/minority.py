"""Probe: the general class (late rows) per instance, and per launch, under LATE_STEPS values; tokens checked
against the reference. python _probe/late.py --steps 8,5,4,3,2 --batches 1,8,64 --scale 1"""
import argparse, sys, os
from collections import defaultdict
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import torch
from torch.profiler import ProfilerActivity, profile
from _timing import per_instance_us
from stepgraph.kernels import _sampling_pivot
from stepgraph.kernels.chain_sampling import chain_verify_sampling, chain_verify_sampling_ref

ap = argparse.ArgumentParser()
ap.add_argument("--steps", default="8,5,4,3,2")
ap.add_argument("--batches", default="1,8,64")
ap.add_argument("--scale", type=float, default=1.0)
ap.add_argument("--dtype", default="bfloat16")
ap.add_argument("--label", default="")
a = ap.parse_args()
K, V, dev = 3, 151936, "cuda"
GENERAL = {"filtered": True, "small_top_k": False, "pivot": True, "late": True}
CASES = [("1 in 8 k2000+p", (2000, 0, 0, 0, 0, 0, 0, 0), 0.9), ("1 in 4 k2000+p", (2000, 0, 0, 0), 0.9)]
for steps in [int(s) for s in a.steps.split(",")]:
    _sampling_pivot.LATE_STEPS = steps
    for B in [int(b) for b in a.batches.split(",")]:
        for name, k, p in CASES:
            torch.manual_seed(0)
            x = (torch.randn(B, K + 1, V, device=dev) * a.scale).to(getattr(torch, a.dtype))
            d = torch.argmax(x.float(), -1)[:, :K].contiguous()
            T = torch.full((B,), 0.8, device=dev)
            turns = k if isinstance(k, tuple) else (k,)
            tk = torch.tensor([turns[b % len(turns)] for b in range(B)], device=dev, dtype=torch.int64)
            tp = torch.full((B,), p, device=dev)
            seed = torch.arange(B, device=dev, dtype=torch.int64)
            mp = torch.full((B,), 0.001 if "minp" in name else 0.0, device=dev)
            bad = 0
            for o in range(2 if B <= 8 else 0):
                off = torch.full((B,), o, device=dev, dtype=torch.int64)
                got = chain_verify_sampling(x, d, T, tk, tp, seed, off.clone(), min_p=mp, **GENERAL).tokens
                ref = chain_verify_sampling_ref(x, d, T, tk, tp, seed, off.clone(), min_p=mp, pivot=True).tokens
                bad += int((got != ref).sum())
            off = torch.zeros(B, device=dev, dtype=torch.int64)
            fn = lambda: chain_verify_sampling(x, d, T, tk, tp, seed, off, min_p=mp, **GENERAL)
            us = per_instance_us(fn)
            line = f"{a.label} steps={steps} s={a.scale:g} {a.dtype} B={B} {name}: {us:.2f} us mismatches={bad}"
            if False:
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(10):
                        fn()
                    torch.cuda.synchronize()
                evs = [e for e in prof.events() if e.device_type.name == "CUDA"]
                per = len(evs) // 10
                seq = defaultdict(float)
                for i, e in enumerate(evs):
                    seq[i % per] += e.time_range.elapsed_us()
                names = [evs[i].name.split("(")[0].replace("_kernel", "")[:8] for i in range(per)]
                line += "  | " + " ".join(f"{n}={seq[i] / 10:.1f}" for i, n in enumerate(names))
            print(line, flush=True)
