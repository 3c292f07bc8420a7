"""Where the time of a top-p-alone sampled verify goes (issue 33: 40.4 / 64.6 µs at B = 1 / 8 against a target
of 40 / 60). Per instance with 20 in one CUDA graph (bf16 logits ``randn``, V = 151,936, K = 3, temperature
0.8), then each launch's device time (torch.profiler) at B = 1 and 8, and the registers of the pivot stats
kernel. Variants by environment: ``PROBE_WARPS`` (the filtered class's warps), ``PROBE_TARGET`` (programs the
layout aims at in all, 528 now) and ``PROBE_MAX_SPLITS`` (32 now).
``python probe_top_p.py LABEL``."""

import os
import sys
from pathlib import Path

import torch
import triton
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from _timing import per_instance_us  # noqa: E402

from stepgraph.kernels import _sampling_mass, _sampling_pivot, chain_sampling  # noqa: E402
from stepgraph.kernels._sampling_filter import BLOCK  # noqa: E402
from stepgraph.kernels.chain_sampling import chain_verify_sampling  # noqa: E402

K, V, CALLS = 3, 151_936, 20
label = sys.argv[1]
if "PROBE_WARPS" in os.environ:
    _sampling_mass.NUM_WARPS = int(os.environ["PROBE_WARPS"])
target = int(os.environ.get("PROBE_TARGET", 528))
max_splits = int(os.environ.get("PROBE_MAX_SPLITS", 32))


def layout(rows, vocab):
    per_row = max(min(max_splits, max(8, triton.cdiv(target, max(rows, 1)))), triton.cdiv(vocab, 255 * BLOCK))
    split = triton.cdiv(triton.cdiv(vocab, per_row), BLOCK) * BLOCK
    return triton.cdiv(vocab, split), split


chain_sampling.split_layout = layout
CASES = {"top-p 0.9": (0.9, {"filtered": True, "pivot": True}), "temperature": (1.0, {"filtered": False})}


def inputs(B, p):
    torch.manual_seed(0)
    x = torch.randn(B, K + 1, V, device="cuda").bfloat16()
    d = torch.argmax(x, -1)[:, :K].contiguous()
    return (x, d, torch.full((B,), 0.8, device="cuda"), torch.zeros(B, dtype=torch.int64, device="cuda"),
            torch.full((B,), p, device="cuda"), torch.arange(B, device="cuda"),
            torch.zeros(B, dtype=torch.int64, device="cuda"))  # fmt: skip


tokens = {}
for B in (1, 8, 64):
    for name, (p, mode) in CASES.items():
        args = inputs(B, p)
        us = per_instance_us(lambda: chain_verify_sampling(*args, **mode))
        print(f"{label:8s} B={B:2d} {name:12s} {us:8.1f} us  layout {layout(B * (K + 1), V)}", flush=True)
for B in (1, 8):
    args = inputs(B, 0.9)

    def call():
        return chain_verify_sampling(*args, filtered=True, pivot=True)

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            call()
        torch.cuda.synchronize()
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    ev.sort(key=lambda e: e.time_range.start)
    per_call = len(ev) // CALLS
    print(f"\n## {label} B={B} top-p 0.9: {sum(e.device_time for e in ev) / CALLS:.1f} us of kernels per call")
    for i in range(per_call):
        ts = sorted(ev[c * per_call + i].device_time for c in range(CALLS))
        print(f"  {i:2d} {ev[i].name[:28]:28s} mean {sum(ts) / CALLS:7.2f}  min {ts[0]:7.2f}  max {ts[-1]:7.2f}")
for name, fn in (("pivot stats", _sampling_pivot._stats_kernel), ("round", _sampling_mass._round_kernel)):
    for cache in fn.device_caches.values():
        for kernel in cache[0].values():
            kernel._init_handles()
            print(f"{label:8s} {name} kernel: regs {kernel.n_regs} spills {kernel.n_spills} warps "
                  f"{kernel.metadata.num_warps}")  # fmt: skip
