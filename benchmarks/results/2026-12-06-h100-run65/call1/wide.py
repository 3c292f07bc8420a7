"""Probe: per-instance sampled verify time and per-launch device time, per case and batch size.
python _probe/wide.py LABEL [--warps 8,16] [--cases ...]"""
import argparse, sys, json, os
from collections import defaultdict
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import torch
from torch.profiler import ProfilerActivity, profile
from _timing import per_instance_us
from stepgraph.kernels import chain_sampling_ref as ref
from stepgraph.kernels import _sampling_topk
from stepgraph.kernels.chain_sampling import chain_verify_sampling
from stepgraph.sampling import sampling_class

ap = argparse.ArgumentParser()
ap.add_argument("label")
ap.add_argument("--warps", default="8")
ap.add_argument("--batches", default="1,8,64")
ap.add_argument("--profile", default="1,8")
ap.add_argument("--scale", type=float, default=1.0)
ap.add_argument("--cases", default="")
a = ap.parse_args()
K, V = 3, 151936
dev = "cuda"
SMALL = {"filtered": True, "small_top_k": True}
PIVOT = {"filtered": True, "small_top_k": False, "pivot": True, "late": False}
GENERAL = {"filtered": True, "small_top_k": False, "pivot": True, "late": True}
wide = ref.SMALL_TOP_K_MAX >= 2048
CASES_ALL = [
    ("k50+p", 50, 0.9, SMALL),
    ("k1000", 1000, 1.0, SMALL),
    ("k1000+p", 1000, 0.9, SMALL),
    ("top-p", 0, 0.9, PIVOT),
    ("mix k50+p/p", (50, 0), 0.9, PIVOT),
    ("k2000 pivot", 2000, 1.0, PIVOT) if not wide else ("k2000 small", 2000, 1.0, SMALL),
    ("k2000+p general", 2000, 0.9, GENERAL) if not wide else ("k2000+p small", 2000, 0.9, SMALL),
    ("mix k2000+p/p", (2000, 0), 0.9, GENERAL if not wide else PIVOT),
    ("k4000+p general", 4000, 0.9, GENERAL),
]
CASES = [c for c in CASES_ALL if c[0] in ("k50+p", "k1000", "k1000+p", "top-p", "mix k50+p/p")]
CASES.insert(1, ("k20+minp", 20, 1.0, SMALL))
if a.cases:
    CASES = [c for c in CASES_ALL + CASES if c[0] in a.cases.split(",")]
out = {}
for warps in [int(w) for w in a.warps.split(",")]:
    _sampling_topk.CUT_WARPS = warps
    for B in [int(b) for b in a.batches.split(",")]:
        for name, k, p, mode in CASES:
            torch.manual_seed(0)
            x = (torch.randn(B, K + 1, V, device=dev) * a.scale).bfloat16()
            d = torch.argmax(x, -1)[:, :K].contiguous()
            T = torch.full((B,), 0.8, device=dev)
            turns = k if isinstance(k, tuple) else (k,)
            tk = torch.tensor([turns[b % len(turns)] for b in range(B)], device=dev, dtype=torch.int64)
            tp = torch.full((B,), p, device=dev)
            seed = torch.arange(B, device=dev, dtype=torch.int64)
            off = torch.zeros(B, device=dev, dtype=torch.int64)
            mp = torch.full((B,), 0.1 if "minp" in name else 0.0, device=dev)
            fn = lambda: chain_verify_sampling(x, d, T, tk, tp, seed, off, min_p=mp, **mode)
            us = per_instance_us(fn)
            line = f"{a.label} s={a.scale:g} warps={warps} B={B} {name}: {us:.2f} us"
            if str(B) in a.profile.split(","):
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(10):
                        fn()
                    torch.cuda.synchronize()
                agg = defaultdict(float)
                for e in prof.events():
                    if e.device_type.name == "CUDA":
                        agg[e.name] += e.time_range.elapsed_us()
                parts = [f"{n.split('(')[0][:22]}={t / 10:.1f}" for n, t in agg.items()]
                line += "  | " + " ".join(parts)
            print(line, flush=True)
            out[line.split(":")[0]] = us
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), f"wide_{a.label}.json"), "w"), indent=1)
