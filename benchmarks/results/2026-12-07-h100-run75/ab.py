"""Probe: the sampled verify per instance (20 in one graph), tokens checked against the reference at two offsets.
python _probe/ab.py --label new --batches 1,8,64"""
import argparse, os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import torch
from _timing import per_instance_us
from stepgraph.kernels.chain_sampling import chain_verify_sampling, chain_verify_sampling_ref

ap = argparse.ArgumentParser()
ap.add_argument("--batches", default="1,8,64")
ap.add_argument("--label", default="")
ap.add_argument("--only", default="")
ap.add_argument("--launches", type=int, default=0)
a = ap.parse_args()
import stepgraph.kernels._sampling_pivot as P
import os as _os, triton.language as _tl
if _os.environ.get("ALONE"): P.ALONE_TILES = _tl.constexpr(int(_os.environ["ALONE"]))
if a.launches: P.DRAW_LAUNCHES = a.launches
import stepgraph.kernels.chain_sampling as _C
if _os.environ.get("MAXSPLITS"): _C.MAX_SPLITS = int(_os.environ["MAXSPLITS"])
if _os.environ.get("LATE_STEPS"): P.LATE_STEPS = int(_os.environ["LATE_STEPS"])
K, V, dev = 3, 151936, "cuda"
PIVOT = {"filtered": True, "small_top_k": False, "pivot": True, "late": False}
BYCUT = {"filtered": True, "small_top_k": False, "pivot": False}
GENERAL = {"filtered": True, "small_top_k": False, "pivot": True, "late": True}
SMALLK = {"filtered": True, "small_top_k": True, "pivot": False}
CASES = [("top_k class k50+p s1", 50, 0.9, SMALLK, 1.0), ("temperature s1", 0, 1.0, {"filtered": False, "small_top_k": False, "pivot": False}, 1.0), ("k2000 alone s1", 2000, 1.0, PIVOT, 1.0), ("k2000 alone s4", 2000, 1.0, PIVOT, 4.0),
         ("k1000 alone s0.6", 1000, 1.0, PIVOT, 0.6), ("top-p 0.9 s1", 0, 0.9, PIVOT, 1.0),
         ("general k2000+p s1", 2000, 0.9, GENERAL, 1.0), ("general k2000+p0.5 s1", 2000, 0.5, GENERAL, 1.0), ("general k2000+p0.5 s4", 2000, 0.5, GENERAL, 4.0), ("general k2000+p s4", 2000, 0.9, GENERAL, 4.0),
         ("top-p 0.5 s1", 0, 0.5, PIVOT, 1.0), ("top-p 0.9 s4", 0, 0.9, PIVOT, 4.0), ("top-p 0.5 s4", 0, 0.5, PIVOT, 4.0), ("by cut k2000+p s1", 2000, 0.9, BYCUT, 1.0),
         ("min-p 0.1 alone s1", 0, 1.0, BYCUT, 1.0), ("by cut k50+p s1", 50, 0.9, BYCUT, 1.0)]
for B in [int(b) for b in a.batches.split(",")]:
    for name, k, p, mode, s in CASES:
        if a.only and not any(o in name for o in a.only.split(",")):
            continue
        torch.manual_seed(0)
        x = (torch.randn(B, K + 1, V, device=dev) * s).bfloat16()
        d = torch.argmax(x.float(), -1)[:, :K].contiguous()
        T = torch.full((B,), 0.8, device=dev)
        tk = torch.full((B,), k, device=dev, dtype=torch.int64)
        tp = torch.full((B,), p, device=dev)
        mp = torch.full((B,), 0.1 if name.startswith("min-p") else 0.0, device=dev)
        seed = torch.arange(B, device=dev, dtype=torch.int64)
        bad = 0
        for o in range(2):
            off = torch.full((B,), o, device=dev, dtype=torch.int64)
            got = chain_verify_sampling(x, d, T, tk, tp, seed, off.clone(), min_p=mp, **mode).tokens
            ref = chain_verify_sampling_ref(x, d, T, tk, tp, seed, off.clone(), min_p=mp, pivot=mode["pivot"]).tokens
            bad += int((got != ref).sum())
        off = torch.zeros(B, device=dev, dtype=torch.int64)
        fn = lambda: chain_verify_sampling(x, d, T, tk, tp, seed, off, min_p=mp, **mode)
        line = f"{a.label} B={B:3d} {name:20s} {per_instance_us(fn):8.2f} us"
        print(line + (f" BAD={bad}" if bad else ""), flush=True)
