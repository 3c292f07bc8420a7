"""Probe: the sampled verify per instance (20 in one graph), every class the count rounds serve, tokens checked
against the reference at two offsets; with --launches, µs per launch of the general class.
python _probe/ab.py --label new --batches 1,8,32,64"""
import argparse, os, sys
from collections import defaultdict
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import torch
from torch.profiler import ProfilerActivity, profile
from _timing import per_instance_us
from stepgraph.kernels.chain_sampling import chain_verify_sampling, chain_verify_sampling_ref, split_layout

ap = argparse.ArgumentParser()
ap.add_argument("--batches", default="1,8,32,64")
ap.add_argument("--label", default="")
ap.add_argument("--launches", action="store_true")
a = ap.parse_args()
K, V, dev = 3, 151936, "cuda"
SMALL = {"filtered": True, "small_top_k": True}
PIVOT = {"filtered": True, "small_top_k": False, "pivot": True, "late": False}
GENERAL = {"filtered": True, "small_top_k": False, "pivot": True, "late": True}
FILTERED = {"filtered": True, "small_top_k": False}
CASES = [("general k2000+p s4", 2000, 0.9, GENERAL, 4.0), ("general k2000+p s1", 2000, 0.9, GENERAL, 1.0),
         ("top-p s1", 0, 0.9, PIVOT, 1.0), ("k50+p s1", 50, 0.9, SMALL, 1.0), ("k1000 s1", 1000, 1.0, SMALL, 1.0),
         ("filtered k2000+p s1", 2000, 0.9, FILTERED, 1.0)]
for B in [int(b) for b in a.batches.split(",")]:
    for name, k, p, mode, s in CASES:
        torch.manual_seed(0)
        x = (torch.randn(B, K + 1, V, device=dev) * s).bfloat16()
        d = torch.argmax(x.float(), -1)[:, :K].contiguous()
        T = torch.full((B,), 0.8, device=dev)
        tk = torch.full((B,), k, device=dev, dtype=torch.int64)
        tp = torch.full((B,), p, device=dev)
        seed = torch.arange(B, device=dev, dtype=torch.int64)
        bad = 0
        for o in range(2):
            off = torch.full((B,), o, device=dev, dtype=torch.int64)
            got = chain_verify_sampling(x, d, T, tk, tp, seed, off.clone(), **mode).tokens
            ref = chain_verify_sampling_ref(x, d, T, tk, tp, seed, off.clone(), pivot=mode.get("pivot", False)).tokens
            bad += int((got != ref).sum())
        off = torch.zeros(B, device=dev, dtype=torch.int64)
        fn = lambda: chain_verify_sampling(x, d, T, tk, tp, seed, off, **mode)
        line = f"{a.label} B={B:3d} {name:22s} {per_instance_us(fn):8.2f} us ({split_layout(B * (K + 1), V)[0]} splits)"
        line += f" BAD={bad}" if bad else ""
        if a.launches and mode is GENERAL and B <= 16:
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
