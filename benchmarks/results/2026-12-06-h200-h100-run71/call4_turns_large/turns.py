"""Probe: the top_p class's launches of rounds and how many take turns (_sampling_pivot.DRAW_LAUNCHES, SEPARATE),
and the general class's LATE_STEPS, per instance with 20 in one graph, tokens checked against the reference at
B <= 8. python _probe/turns.py --batches 1,8,64"""
import argparse, os, sys
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import torch
from _timing import per_instance_us
import stepgraph.kernels._sampling_pivot as sp
from stepgraph.kernels.chain_sampling import chain_verify_sampling, chain_verify_sampling_ref
from stepgraph.sampling import sampling_class

ap = argparse.ArgumentParser()
ap.add_argument("--batches", default="1,8,64")
ap.add_argument("--classes", default="top_p,general")
a = ap.parse_args()
K, V, dev = 3, 151936, "cuda"
TOP_P = [("top-p 0.9 s1", "top_p", (0,), 0.9, 1.0), ("top-p 0.5 s1", "top_p", (0,), 0.5, 1.0),
         ("top-p 0.5 s4", "top_p", (0,), 0.5, 4.0), ("mix k50/p0.9 s4", "top_p", (50, 0), 0.9, 4.0),
         ("top-k 2000 s1", "top_p", (2000,), 1.0, 1.0)]
GENERAL = [("k2000+p0.9 s4", "general", (2000,), 0.9, 4.0), ("k2000+p0.9 s1", "general", (2000,), 0.9, 1.0),
           ("k1100+p0.5 s1", "general", (1100,), 0.5, 1.0)]
SETTINGS = {"top_p": [("L5 S4", 5, 4, 5), ("L6 S4", 6, 4, 5), ("L5 S2", 5, 2, 5), ("L6 S2", 6, 2, 5)],
            "general": [("LS5", 6, 4, 5), ("LS4", 6, 4, 4), ("LS6", 6, 4, 6)]}
for B in [int(b) for b in a.batches.split(",")]:
    for name, cls, turns, p, s in TOP_P + GENERAL:
        if cls not in a.classes.split(","):
            continue
        mode = sampling_class(cls).kernel
        torch.manual_seed(0)
        x = (torch.randn(B, K + 1, V, device=dev) * s).bfloat16()
        d = torch.argmax(x.float(), -1)[:, :K].contiguous()
        T = torch.full((B,), 0.8, device=dev)
        tk = torch.tensor([turns[b % len(turns)] for b in range(B)], device=dev, dtype=torch.int64)
        tp = torch.full((B,), p, device=dev)
        seed = torch.arange(B, device=dev, dtype=torch.int64)
        line = f"B={B:2d} {name:18s}"
        for label, launches, separate, late_steps in SETTINGS[cls]:
            sp.DRAW_LAUNCHES, sp.SEPARATE, sp.LATE_STEPS = launches, separate, late_steps
            bad = 0
            if B <= 8:
                for o in range(2):
                    off = torch.full((B,), o, device=dev, dtype=torch.int64)
                    got = chain_verify_sampling(x, d, T, tk, tp, seed, off.clone(), **mode).tokens
                    ref = chain_verify_sampling_ref(x, d, T, tk, tp, seed, off.clone(), pivot=True).tokens
                    bad += int((got != ref).sum())
            off = torch.zeros(B, device=dev, dtype=torch.int64)
            us = per_instance_us(lambda: chain_verify_sampling(x, d, T, tk, tp, seed, off, **mode))
            line += f" | {label}: {us:7.2f}" + (f" BAD={bad}" if bad else "")
        print(line, flush=True)
