"""Run 26 probe: host time of InputCopyPlan.stage() for 8 new inputs, three versions of kernels/ in one
process, interleaved round by round (the host's speed drifts over minutes, so separate runs mislead).

Usage (repository root, with the previous version at ab_base/ and a variant at ab_var/):
    python3 benchmarks/results/2026-12-01-h200-run26/probe_stage_ab.py
"""

import importlib
import statistics
import sys
import time

import torch

sys.path[:0] = ["ab_base", "."]
versions = {"before (HEAD)": importlib.import_module("kernels.input_copy")}
for m in [m for m in sys.modules if m.split(".")[0] == "kernels"]:
    del sys.modules[m]  # the variant's package, imported afresh under the same name
sys.path[0] = "ab_var"
versions["is_cpu first + dense"] = importlib.import_module("kernels.input_copy")
versions["get_device first + dense"] = importlib.import_module("stepgraph.kernels.input_copy")

B, MAXB = 3, 64
shapes = [(MAXB,)] * 2 + [(MAXB, 1024)] + [(MAXB,)] * 5
dtypes = [torch.int64, torch.int64, torch.bfloat16, torch.int64, torch.int32, torch.float32, torch.bool, torch.int64]
dsts = [torch.zeros(s, dtype=d, device="cuda") for s, d in zip(shapes, dtypes)]
dev = {i: torch.zeros((B, *d.shape[1:]), dtype=d.dtype, device="cuda") for i, d in enumerate(dsts)}
forms = {"device": dev, "pinned": {i: t.cpu().pin_memory() for i, t in dev.items()},
         "pageable": {i: t.cpu() for i, t in dev.items()}}  # fmt: skip
plans = {}
for name, mod in versions.items():
    plan = mod.InputCopyPlan(dsts, [0] * len(dsts))
    for srcs in forms.values():
        plan.stage(srcs)
        plan.commit(B)
    torch.cuda.synchronize()
    plans[name] = plan
print(f"# stage() of 8 inputs, µs per call (median of 30 rounds of 1000 calls each; {torch.cuda.get_device_name()})")
t = {(v, f): [] for v in plans for f in forms}
for _ in range(30):
    for form, srcs in forms.items():
        for name, plan in plans.items():
            start = time.perf_counter()
            for _ in range(1000):
                plan.stage(srcs)  # takes the same ring buffer each time: nothing launched, nothing waits
            t[name, form].append((time.perf_counter() - start) / 1000 * 1e6)
            plan.abandon()
for form in forms:
    print(f"{form:9s}", "  ".join(f"{v}: {statistics.median(t[v, form]):.2f}" for v in plans))
