"""Probe: the sampled verify per instance (20 in one graph) with main's split layout (about 1056 programs,
rounded up) against the branch's (at most PIVOT_PROGRAMS for the pivot classes, 1056 for the others); tokens
checked against the reference at two offsets. python _probe/layout.py --batches 1,4,8,16,32,64"""
import argparse, sys, os
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import torch, triton
from _timing import per_instance_us
from stepgraph.kernels import _sampling_mass, _sampling_pivot, chain_sampling
from stepgraph.kernels._sampling_filter import BLOCK
from stepgraph.kernels.chain_sampling import chain_verify_sampling, chain_verify_sampling_ref

ap = argparse.ArgumentParser()
ap.add_argument("--batches", default="1,8,16,32")
ap.add_argument("--variants", default="main,660,528,r80")
a = ap.parse_args()
branch_layout = chain_sampling.split_layout


def main_layout(rows, vocab, programs=None):
    per_row = max(min(32, max(8, triton.cdiv(1056, max(rows, 1)))), triton.cdiv(vocab, 255 * BLOCK))
    split = triton.cdiv(triton.cdiv(vocab, per_row), BLOCK) * BLOCK
    return triton.cdiv(vocab, split), split


class Capped:
    """The stats kernel launched with a register cap (``maxnreg``), for the r80 variant."""

    def __init__(self, kernel):
        self.kernel, self.cap = kernel, None

    def __getitem__(self, grid):
        launch = self.kernel[grid]
        return lambda *args, **kw: launch(*args, **kw, **({"maxnreg": self.cap} if self.cap else {}))


capped = Capped(_sampling_mass._pivot_stats_kernel)
_sampling_mass._pivot_stats_kernel = capped
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
        refs = [chain_verify_sampling_ref(x, d, T, tk, tp, seed, torch.full((B,), o, device=dev),
                                          pivot=mode.get("pivot", False)).tokens for o in range(2)]
        cells = []
        for variant in a.variants.split(","):
            label = variant
            capped.cap, _sampling_pivot.REGISTERS = (80, 80) if variant == "r80" else (None, 96)
            if variant == "r80":
                variant = "792"
            if variant == "main":
                chain_sampling.split_layout = main_layout
            else:
                chain_sampling.split_layout = branch_layout
                chain_sampling.PIVOT_PROGRAMS = int(variant)
            programs = 1056 if variant == "main" or mode is SMALL else int(variant)
            splits = chain_sampling.split_layout(B * (K + 1), V, programs)[0]
            bad = 0
            for o in range(2):
                got = chain_verify_sampling(x, d, T, tk, tp, seed, torch.full((B,), o, device=dev), **mode).tokens
                bad += int((got != refs[o]).sum())
            off = torch.zeros(B, device=dev, dtype=torch.int64)
            us = per_instance_us(lambda: chain_verify_sampling(x, d, T, tk, tp, seed, off, **mode))
            cells.append(f"{label}({splits}sp) {us:7.2f}" + (f" BAD={bad}" if bad else ""))
        print(f"B={B:3d} {name:20s} " + " | ".join(cells), flush=True)
