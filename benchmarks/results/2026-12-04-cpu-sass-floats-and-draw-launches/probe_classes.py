"""For the next GPU call: the `top_p` and `general` classes' verify per instance (20 in one CUDA graph; bf16
``randn`` logits, V = 151,936, K = 3, temperature 0.8) at B = 1, 8 and 64, under each class's kernel options
as the code on ``sys.path`` declares them, then each launch's device time (torch.profiler) at B = 8 and 64.
Cases: top-p 0.9 alone, top-k 50 + top-p 0.9 and top-p 0.9 in turns (chat), top-k 2000 + top-p 0.9.
Code from before the `general` class (no ``late`` option) runs every case with its one pivot path. From the
repository's root, the code measured first on the path::

    python probe_classes.py LABEL                        # this tree
    PYTHONPATH=before python probe_classes.py before     # git archive 7a9f7ff stepgraph | tar -x -C before
"""

import inspect
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from _timing import per_instance_us  # noqa: E402

import stepgraph  # noqa: E402
from stepgraph.kernels.chain_sampling import chain_verify_sampling  # noqa: E402

K, V, CALLS = 3, 151_936, 20
label = sys.argv[1] if len(sys.argv) > 1 else "now"
has_late = "late" in inspect.signature(chain_verify_sampling).parameters
print("stepgraph from", stepgraph.__file__, "| late option:", has_late)
CASES = {  # name: (top-k of the requests in turns, top-p, late requests among them)
    "top-p 0.9": ((0,), 0.9, False),
    "top-k 50 + top-p 0.9 / top-p 0.9": ((50, 0), 0.9, False),
    "top-k 2000 + top-p 0.9": ((2000,), 0.9, True),
}


def inputs(B, turns, p):
    torch.manual_seed(0)
    x = torch.randn(B, K + 1, V, device="cuda").bfloat16()
    d = torch.argmax(x, -1)[:, :K].contiguous()
    k = torch.tensor([turns[b % len(turns)] for b in range(B)], device="cuda")
    return (x, d, torch.full((B,), 0.8, device="cuda"), k, torch.full((B,), p, device="cuda"),
            torch.arange(B, device="cuda"), torch.zeros(B, dtype=torch.int64, device="cuda"))  # fmt: skip


def call_of(args, late):
    options = {"filtered": True, "pivot": True, "min_p": torch.zeros(args[0].shape[0], device="cuda")}
    if has_late:
        options["late"] = late
    return lambda: chain_verify_sampling(*args, **options)


for B in (1, 8, 64):
    for name, (turns, p, late) in CASES.items():
        us = per_instance_us(call_of(inputs(B, turns, p), late))
        print(f"{label} B={B:2d} {name:34s} {us:8.1f} us", flush=True)
for B in (8, 64):
    for name, (turns, p, late) in CASES.items():
        call = call_of(inputs(B, turns, p), late)
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(CALLS):
                call()
            torch.cuda.synchronize()
        ev = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                    key=lambda e: e.time_range.start)  # fmt: skip
        per_call = len(ev) // CALLS
        print(f"\n## {label} B={B} {name}: {sum(e.device_time for e in ev) / CALLS:.1f} us of kernels per call")
        for i in range(per_call):
            ts = sorted(ev[c * per_call + i].device_time for c in range(CALLS))
            print(f"  {i:2d} {ev[i].name[:28]:28s} mean {sum(ts) / CALLS:7.2f}  min {ts[0]:7.2f}  max {ts[-1]:7.2f}")
