"""Probe (run 83): the sampled verify of `general` batches, pure and mixed, at the layout's aim of 1056 programs
a launch (main) or another (660: five an SM, what the pivot kernels' 96 registers allow), per instance with 20 in
one graph, tokens checked against the reference at two offsets.

    PROGRAMS=660 python3 _probe/layout.py --label 660 --batches 8,16
    MAX_SPLITS=16 python3 _probe/layout.py --label s16 --batches 1   # fewer splits a row at B = 1
    TRITON_INTERPRET=1 python3 benchmarks/results/2026-12-08-sm90-run83/layout.py --smoke   # CPU: tokens only
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import torch

import stepgraph.kernels.chain_sampling as C
from stepgraph.kernels.chain_sampling import chain_verify_sampling, chain_verify_sampling_ref

ap = argparse.ArgumentParser()
ap.add_argument("--batches", default="8,16")
ap.add_argument("--label", default="")
ap.add_argument("--only", default="")
ap.add_argument("--smoke", action="store_true", help="CPU: a small vocabulary, tokens checked, nothing timed")
a = ap.parse_args()
if os.environ.get("PROGRAMS"):
    C.PROGRAMS = int(os.environ["PROGRAMS"])
if os.environ.get("MAX_SPLITS"):
    C.MAX_SPLITS = int(os.environ["MAX_SPLITS"])
K = 3
V, dev = (8192, "cpu") if a.smoke else (151936, "cuda")
PIVOT = {"filtered": True, "small_top_k": False, "pivot": True, "late": False}
GENERAL = {"filtered": True, "small_top_k": False, "pivot": True, "late": True}
SMALLK = {"filtered": True, "small_top_k": True, "pivot": False}
# (name, top-k of every `every`-th request from the first, top-k of the others, top-p, mode, logit scale)
CASES = [("general pure s1", 1, 2000, 0, 0.9, GENERAL, 1.0), ("general pure s4", 1, 2000, 0, 0.9, GENERAL, 4.0),
         ("general half late s4", 2, 2000, 0, 0.9, GENERAL, 4.0), ("general 1 in 4 late s4", 4, 2000, 0, 0.9, GENERAL, 4.0),
         ("general 1 in 8 late s4", 8, 2000, 0, 0.9, GENERAL, 4.0), ("general half late s1", 2, 2000, 0, 0.9, GENERAL, 1.0),
         ("top_p class p0.9 s1", 1, 0, 0, 0.9, PIVOT, 1.0), ("top_k class k50+p0.9 s1", 1, 50, 50, 0.9, SMALLK, 1.0)]  # fmt: skip
for B in [int(b) for b in ([2] if a.smoke else a.batches.split(","))]:
    for name, every, k_first, k_other, p, mode, s in CASES:
        if a.only and not any(o in name for o in a.only.split(",")):
            continue
        if B < every and every > 1:
            continue  # the same batch as the pure case
        torch.manual_seed(0)
        x = (torch.randn(B, K + 1, V, device=dev) * s).bfloat16()
        d = torch.argmax(x.float(), -1)[:, :K].contiguous()
        T = torch.full((B,), 0.8, device=dev)
        tk = torch.where(torch.arange(B, device=dev) % every == 0, k_first, k_other).to(torch.int64)
        tp = torch.full((B,), p, device=dev)
        seed = torch.arange(B, device=dev, dtype=torch.int64)
        bad = 0
        for o in range(2):
            off = torch.full((B,), o, device=dev, dtype=torch.int64)
            got = chain_verify_sampling(x, d, T, tk, tp, seed, off.clone(), **mode).tokens
            ref = chain_verify_sampling_ref(x, d, T, tk, tp, seed, off.clone(), pivot=mode["pivot"]).tokens
            bad += int((got != ref).sum())
        splits = C.split_layout(B * (K + 1), V)[0]
        if a.smoke:
            print(f"{a.label} B={B:3d} {name:24s} splits {splits} BAD={bad}", flush=True)
            continue
        from _timing import per_instance_us

        off = torch.zeros(B, device=dev, dtype=torch.int64)
        us = per_instance_us(lambda: chain_verify_sampling(x, d, T, tk, tp, seed, off, **mode))
        print(f"{a.label} B={B:3d} {name:24s} {splits:2d} splits {us:8.2f} us" + (f" BAD={bad}" if bad else ""), flush=True)
