"""Probe: splits a row at small batches (chain_sampling.MAX_SPLITS), per instance with 20 in one graph, tokens
checked against the reference. python _probe/splits.py --max 32,48,64,80 --batches 1,2,4"""
import argparse, os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import torch
from _timing import per_instance_us
import stepgraph.kernels.chain_sampling as cs
from stepgraph.sampling import sampling_class

ap = argparse.ArgumentParser()
ap.add_argument("--batches", default="1,2,4")
ap.add_argument("--max", default="32,48,64,80")
a = ap.parse_args()
K, V, dev = 3, 151936, "cuda"
CASES = [("general k2000+p s4", 2000, 0.9, "general", 4.0), ("general k2000+p s1", 2000, 0.9, "general", 1.0),
         ("top-p s4", 0, 0.9, "top_p", 4.0), ("mix k50/p s4", (50, 0), 0.9, "top_p", 4.0),
         ("k50+p s1", 50, 0.9, "top_k", 1.0), ("k1000+p s1", 1000, 0.9, "top_k", 1.0),
         ("temperature", 0, 1.0, "temperature", 1.0), ("min-p s1", 0, 1.0, "top_k_top_p", 1.0)]
for B in [int(b) for b in a.batches.split(",")]:
    for name, k, p, cls, s in CASES:
        mode = sampling_class(cls).kernel
        torch.manual_seed(0)
        x = (torch.randn(B, K + 1, V, device=dev) * s).bfloat16()
        d = torch.argmax(x.float(), -1)[:, :K].contiguous()
        T = torch.full((B,), 0.8, device=dev)
        turns = k if isinstance(k, tuple) else (k,)
        tk = torch.tensor([turns[b % len(turns)] for b in range(B)], device=dev, dtype=torch.int64)
        tp = torch.full((B,), p, device=dev)
        mp = torch.full((B,), 0.1 if cls == "top_k_top_p" else 0.0, device=dev)
        seed = torch.arange(B, device=dev, dtype=torch.int64)
        line = f"B={B:2d} {name:20s}"
        for ms in [int(m) for m in a.max.split(",")]:
            cs.MAX_SPLITS = ms
            bad = 0
            for o in range(2):
                off = torch.full((B,), o, device=dev, dtype=torch.int64)
                got = cs.chain_verify_sampling(x, d, T, tk, tp, seed, off.clone(), min_p=mp, **mode).tokens
                ref = cs.chain_verify_sampling_ref(x, d, T, tk, tp, seed, off.clone(), min_p=mp,
                                                   pivot=mode.get("pivot", False)).tokens
                bad += int((got != ref).sum())
            off = torch.zeros(B, device=dev, dtype=torch.int64)
            us = per_instance_us(lambda: cs.chain_verify_sampling(x, d, T, tk, tp, seed, off, min_p=mp, **mode))
            line += f" | {ms}({cs.split_layout(B * (K + 1), V)[0]}): {us:6.2f}" + (f" BAD={bad}" if bad else "")
        print(line, flush=True)
