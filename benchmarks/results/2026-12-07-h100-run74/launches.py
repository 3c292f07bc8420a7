"""Per launch (torch.profiler, CUDA kernel times) of the general class at B = 8, peaked rows; mean of 20 calls."""
import sys, collections
import torch
from stepgraph.kernels.chain_sampling import chain_verify_sampling
label = sys.argv[1]
import os
import stepgraph.kernels._sampling_pivot as P
import os as _os, triton.language as _tl
if _os.environ.get("ALONE"): P.ALONE_TILES = _tl.constexpr(int(_os.environ["ALONE"]))
if os.environ.get("LAUNCHES"): P.DRAW_LAUNCHES = int(os.environ["LAUNCHES"])
k_, p_, late_ = int(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "late"
K, V, dev = 3, 151936, "cuda"
for B, s in ((8, 1.0), (1, 1.0)):
    torch.manual_seed(0)
    x = (torch.randn(B, K + 1, V, device=dev) * s).bfloat16()
    d = torch.argmax(x.float(), -1)[:, :K].contiguous()
    T = torch.full((B,), 0.8, device=dev); tk = torch.full((B,), k_, device=dev, dtype=torch.int64)
    tp = torch.full((B,), p_, device=dev); seed = torch.arange(B, device=dev, dtype=torch.int64)
    off = torch.zeros(B, device=dev, dtype=torch.int64)
    fn = lambda: chain_verify_sampling(x, d, T, tk, tp, seed, off, filtered=True, small_top_k=False, pivot=True, late=late_)
    for _ in range(3): fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(20): fn()
        torch.cuda.synchronize()
    evs = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    per = len(evs) // 20
    seq = collections.defaultdict(float)
    for i, e in enumerate(evs):
        seq[(i % per, e.name[:28])] += e.device_time / 20
    print(label, f"B={B} s={s}", " | ".join(f"{n}:{t:.1f}" for (_, n), t in sorted(seq.items())), flush=True)
