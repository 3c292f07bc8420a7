"""Probe: where the sampled verify's and the log-probabilities' device time goes, kernel by kernel.

torch.profiler over eager calls (after a warm-up), per setting and batch size: each kernel's mean device
time per call, and the per-instance time of the whole call (20 in one graph).
"""
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, "benchmarks")
from _timing import per_instance_us  # noqa: E402

from stepgraph.kernels.chain_sampling import chain_verify_sampling  # noqa: E402
from stepgraph.speculative.scores import token_scores  # noqa: E402

K, V = 3, 151936
dev = "cuda"
CASES = (
    ("temperature", 0.8, 0, 1.0, 0.0, {"filtered": False}),
    ("top-k 50 + top-p 0.9", 0.8, 50, 0.9, 0.0, {"small_top_k": True}),
    ("top-p 0.9", 0.8, 0, 0.9, 0.0, {"filtered": True}),
    ("top-p 0.95 T=1", 1.0, 0, 0.95, 0.0, {"filtered": True}),
    ("top-k 1000", 0.8, 1000, 1.0, 0.0, {"filtered": True}),
    ("min-p 0.1", 0.8, 0, 1.0, 0.1, {"filtered": True}),
)


def kernels_of(fn, calls=10):
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per[e.name[:60]] += e.device_time / calls
    return per


for B in (1, 8, 32, 64):
    torch.manual_seed(0)
    x = torch.randn(B, K + 1, V, device=dev).bfloat16()
    d = torch.argmax(x, -1)[:, :K].contiguous()
    for name, temp, k, p, min_p, mode in CASES:
        T = torch.full((B,), temp, device=dev)
        tk = torch.full((B,), k, device=dev, dtype=torch.int64)
        tp = torch.full((B,), p, device=dev)
        mp = torch.full((B,), min_p, device=dev)
        seed = torch.arange(B, device=dev, dtype=torch.int64)
        off = torch.zeros(B, device=dev, dtype=torch.int64)
        fn = lambda: chain_verify_sampling(x, d, T, tk, tp, seed, off, min_p=mp, **mode)  # noqa: E731
        whole = per_instance_us(fn, copies=5)
        per = kernels_of(fn)
        print(f"B={B} {name}: {whole:.1f} us per instance; kernels (us/call): "
              + ", ".join(f"{n} {t:.1f}" for n, t in sorted(per.items(), key=lambda kv: -kv[1])), flush=True)
    tok = d[:, :1].expand(B, K + 1).contiguous()
    for n in (0, 20):
        fn = lambda n=n: token_scores(x, tok, n)  # noqa: E731
        whole = per_instance_us(fn, copies=5)
        per = kernels_of(fn)
        print(f"B={B} logprobs top-{n}: {whole:.1f} us per instance; kernels: "
              + ", ".join(f"{k_} {t:.1f}" for k_, t in sorted(per.items(), key=lambda kv: -kv[1])), flush=True)
