"""Probe: the top_p class's launches of rounds (_sampling_pivot.DRAW_LAUNCHES), per instance with 20 in one graph,
tokens checked against the reference at B <= 8. python _probe/draws.py --launches 5,6,8 --batches 1,8,64"""
import argparse, os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import torch
from _timing import per_instance_us
import stepgraph.kernels._sampling_pivot as sp
from stepgraph.kernels.chain_sampling import chain_verify_sampling, chain_verify_sampling_ref
from stepgraph.sampling import sampling_class

ap = argparse.ArgumentParser()
ap.add_argument("--batches", default="1,8,64")
ap.add_argument("--launches", default="5,6,8")
a = ap.parse_args()
K, V, dev = 3, 151936, "cuda"
mode = sampling_class("top_p").kernel
CASES = [("top-p 0.9 s1", (0,), 0.9, 1.0), ("top-p 0.9 s4", (0,), 0.9, 4.0), ("top-p 0.5 s1", (0,), 0.5, 1.0),
         ("top-p 0.5 s4", (0,), 0.5, 4.0), ("mix k50/p0.9 s4", (50, 0), 0.9, 4.0), ("top-k 2000 s1", (2000,), 1.0, 1.0)]
for B in [int(b) for b in a.batches.split(",")]:
    for name, turns, p, s in CASES:
        torch.manual_seed(0)
        x = (torch.randn(B, K + 1, V, device=dev) * s).bfloat16()
        d = torch.argmax(x.float(), -1)[:, :K].contiguous()
        T = torch.full((B,), 0.8, device=dev)
        tk = torch.tensor([turns[b % len(turns)] for b in range(B)], device=dev, dtype=torch.int64)
        tp = torch.full((B,), p, device=dev)
        seed = torch.arange(B, device=dev, dtype=torch.int64)
        line = f"B={B:2d} {name:18s}"
        for n in [int(v) for v in a.launches.split(",")]:
            sp.DRAW_LAUNCHES = n
            bad = 0
            if B <= 8:
                for o in range(2):
                    off = torch.full((B,), o, device=dev, dtype=torch.int64)
                    got = chain_verify_sampling(x, d, T, tk, tp, seed, off.clone(), **mode).tokens
                    ref = chain_verify_sampling_ref(x, d, T, tk, tp, seed, off.clone(), pivot=True).tokens
                    bad += int((got != ref).sum())
            off = torch.zeros(B, device=dev, dtype=torch.int64)
            us = per_instance_us(lambda: chain_verify_sampling(x, d, T, tk, tp, seed, off, **mode))
            line += f" | {n}: {us:7.2f}" + (f" BAD={bad}" if bad else "")
        print(line, flush=True)
