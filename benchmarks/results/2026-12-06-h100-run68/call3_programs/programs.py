"""Probe: the sampled verify per instance (20 in one graph) under PROGRAMS values (the split layout's aim).
python _probe/programs.py --programs 1056,792,660,528 --batches 4,8,16,32"""
import argparse, sys, os
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import torch
from _timing import per_instance_us
from stepgraph.kernels import chain_sampling
from stepgraph.kernels.chain_sampling import chain_verify_sampling, chain_verify_sampling_ref

ap = argparse.ArgumentParser()
ap.add_argument("--programs", default="1056,792,660,528")
ap.add_argument("--batches", default="4,8,16,32")
a = ap.parse_args()
K, V, dev = 3, 151936, "cuda"
SMALL = {"filtered": True, "small_top_k": True}
PIVOT = {"filtered": True, "small_top_k": False, "pivot": True, "late": False}
GENERAL = {"filtered": True, "small_top_k": False, "pivot": True, "late": True}
CASES = [("general k2000+p s4", 2000, 0.9, GENERAL, 4.0), ("general k2000+p s1", 2000, 0.9, GENERAL, 1.0),
         ("top-p s1", 0, 0.9, PIVOT, 1.0), ("k50+p s1", 50, 0.9, SMALL, 1.0), ("k1000 s1", 1000, 1.0, SMALL, 1.0)]
for B in [int(b) for b in a.batches.split(",")]:
    for name, k, p, mode, s in CASES:
        torch.manual_seed(0)
        x = (torch.randn(B, K + 1, V, device=dev) * s).bfloat16()
        d = torch.argmax(x.float(), -1)[:, :K].contiguous()
        T = torch.full((B,), 0.8, device=dev)
        tk = torch.full((B,), k, device=dev, dtype=torch.int64)
        tp = torch.full((B,), p, device=dev)
        seed = torch.arange(B, device=dev, dtype=torch.int64)
        off = torch.zeros(B, device=dev, dtype=torch.int64)
        ref = chain_verify_sampling_ref(x, d, T, tk, tp, seed, off.clone(), pivot=mode.get("pivot", False)).tokens
        cells = []
        for programs in [int(q) for q in a.programs.split(",")]:
            chain_sampling.PROGRAMS = programs
            splits = chain_sampling.split_layout(B * (K + 1), V)[0]
            got = chain_verify_sampling(x, d, T, tk, tp, seed, off.clone(), **mode).tokens
            bad = int((got != ref).sum())
            us = per_instance_us(lambda: chain_verify_sampling(x, d, T, tk, tp, seed, off, **mode))
            cells.append(f"P={programs}({splits}sp) {us:7.2f}" + (f" BAD={bad}" if bad else ""))
        print(f"B={B:3d} {name:20s} " + " | ".join(cells), flush=True)
