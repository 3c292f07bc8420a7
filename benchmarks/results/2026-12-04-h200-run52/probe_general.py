"""The top-k 2000 + top-p 0.9 verify (issue 33's general class) in the ``top_p`` class's kernels (``pivot``),
beside top-p 0.9 alone, per instance with 20 in one CUDA graph (bf16 logits ``randn``, V = 151,936, K = 3,
temperature 0.8) at B = 1, 8 and 64; then each launch's device time (torch.profiler) of both at B = 8 and 64,
and the round kernel's registers. ``PROBE_STATS_REGS`` set the pivot stats launch's ``maxnreg`` through a
module setting of the code measured (``STATS_REGISTERS``, not kept). ``python probe_general.py LABEL``
from the repository's root."""

import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from _timing import per_instance_us  # noqa: E402

import stepgraph  # noqa: E402
from stepgraph.kernels import _sampling_mass  # noqa: E402
from stepgraph.kernels.chain_sampling import chain_verify_sampling, split_layout  # noqa: E402

print("stepgraph from", stepgraph.__file__)
import os  # noqa: E402

from stepgraph.kernels import _sampling_pivot  # noqa: E402

if "PROBE_STATS_REGS" in os.environ:
    _sampling_pivot.STATS_REGISTERS = int(os.environ["PROBE_STATS_REGS"])
K, V, CALLS = 3, 151_936, 20
label = sys.argv[1] if len(sys.argv) > 1 else "head"
CASES = {

    "general-pivot-mode k2000 p0.9": (2000, 0.9, {"filtered": True, "pivot": True}),
    "top-p 0.9": (0, 0.9, {"filtered": True, "pivot": True}),
}


def inputs(B, k, p):
    torch.manual_seed(0)
    x = torch.randn(B, K + 1, V, device="cuda").bfloat16()
    d = torch.argmax(x, -1)[:, :K].contiguous()
    return (x, d, torch.full((B,), 0.8, device="cuda"), torch.full((B,), k, dtype=torch.int64, device="cuda"),
            torch.full((B,), p, device="cuda"), torch.arange(B, device="cuda"),
            torch.zeros(B, dtype=torch.int64, device="cuda"))  # fmt: skip


for B in (1, 8, 64):
    for name, (k, p, mode) in CASES.items():
        args = inputs(B, k, p)
        us = per_instance_us(lambda args=args, mode=mode: chain_verify_sampling(*args, **mode))
        print(f"{label} B={B:2d} {name:32s} {us:8.1f} us layout {split_layout(B * (K + 1), V)}", flush=True)
for B, (k, p) in [(b, c) for b in (8, 64) for c in ((2000, 0.9), (0, 0.9))]:
    args = inputs(B, k, p)

    def call(args=args):
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
    print(f"\n## {label} B={B} k={k}: {sum(e.device_time for e in ev) / CALLS:.1f} us of kernels per call")
    for i in range(per_call):
        ts = sorted(ev[c * per_call + i].device_time for c in range(CALLS))
        print(f"  {i:2d} {ev[i].name[:28]:28s} mean {sum(ts) / CALLS:7.2f}  min {ts[0]:7.2f}  max {ts[-1]:7.2f}")
for cache in _sampling_mass._round_kernel.device_caches.values():
    for kernel in cache[0].values():
        kernel._init_handles()
        print(f"round kernel: regs {kernel.n_regs} spills {kernel.n_spills}")
