"""Probe: the windowed filtered class on the H200 - per-kernel time, per-instance time, and how many rows
the window leaves to the exact search, for flat (random normal) logits and for peaked ones."""
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, "benchmarks")
from _timing import per_instance_us  # noqa: E402

from stepgraph.kernels import _sampling_mass  # noqa: E402
from stepgraph.kernels.chain_sampling import chain_verify_sampling, filter_cut_keys, filter_cut_keys_ref  # noqa: E402

K, V = 3, 151936
dev = "cuda"
exact_rows = []
kernel = _sampling_mass._exact_cut_kernel


class Spy:
    def __getitem__(self, grid):
        def run(*a, **kw):
            exact_rows.append(int((a[9][:, 0] == 2).sum()))
            return kernel[grid](*a, **kw)
        return run


CASES = (
    ("top-p 0.9", 0.8, 0, 0.9, 0.0),
    ("top-p 0.95 T=1", 1.0, 0, 0.95, 0.0),
    ("top-k 1000", 0.8, 1000, 1.0, 0.0),
    ("top-k 1000 + top-p 0.9", 0.8, 1000, 0.9, 0.0),
    ("min-p 0.1", 0.8, 0, 1.0, 0.1),
)
for B in (1, 8, 32, 64):
    torch.manual_seed(0)
    for shape, scale in (("flat", 1.0), ("peaked", 4.0)):
        x = (torch.randn(B, K + 1, V, device=dev) * scale).bfloat16()
        d = torch.argmax(x, -1)[:, :K].contiguous()
        for name, temp, k, p, min_p in CASES:
            T = torch.full((B,), temp, device=dev)
            tk = torch.full((B,), k, device=dev, dtype=torch.int64)
            tp = torch.full((B,), p, device=dev)
            mp = torch.full((B,), min_p, device=dev)
            seed = torch.arange(B, device=dev, dtype=torch.int64)
            off = torch.zeros(B, device=dev, dtype=torch.int64)
            fn = lambda: chain_verify_sampling(x, d, T, tk, tp, seed, off, min_p=mp, filtered=True)  # noqa: E731
            whole = per_instance_us(fn, copies=5)
            fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(10):
                    fn()
                torch.cuda.synchronize()
            per = defaultdict(float)
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA:
                    per[e.name[:40]] += e.device_time / 10
            _sampling_mass._exact_cut_kernel = Spy()
            same = torch.equal(filter_cut_keys(x, T, tk, tp), filter_cut_keys_ref(x, T, tk, tp)) if B <= 8 else None
            _sampling_mass._exact_cut_kernel = kernel
            print(f"B={B} {shape} {name}: {whole:.1f} us per instance; exact rows {exact_rows[-1]} of {B * (K + 1)};"
                  f" cut = reference: {same}; kernels (us/call): "
                  + ", ".join(f"{n} {t:.1f}" for n, t in sorted(per.items(), key=lambda kv: -kv[1])), flush=True)
