import sys, torch
sys.path.insert(0, "benchmarks")
from _timing import per_instance_us
import stepgraph.kernels._sampling_topk as st
from stepgraph.kernels.chain_sampling import chain_verify_sampling
from torch.profiler import profile, ProfilerActivity
dev = "cuda"; K = 3; V = 151936
for B in (1, 8, 64):
    x = torch.randn(B, K + 1, V, device=dev).bfloat16()
    d = torch.argmax(x, -1)[:, :K].contiguous()
    T = torch.full((B,), 0.8, device=dev); tk = torch.full((B,), 50, device=dev, dtype=torch.int64)
    tp = torch.full((B,), 0.9, device=dev); mp = torch.zeros(B, device=dev)
    seed = torch.arange(B, device=dev, dtype=torch.int64); off = torch.zeros(B, device=dev, dtype=torch.int64)
    f = lambda: chain_verify_sampling(x, d, T, tk, tp, seed, off, min_p=mp, small_top_k=True)
    g = lambda: chain_verify_sampling(x, d, T, tk, tp, seed, off, min_p=mp, small_top_k=False)
    res = []
    for gb, mx in ((1024, 1024), (2048, 1024), (4096, 1024), (2048, 512)):
        st.GATHER_BLOCK, st.MAXIMA_PER_ROW = gb, mx
        res.append(f"gb{gb}/max{mx} {per_instance_us(f, copies=5):.1f}")
    st.GATHER_BLOCK, st.MAXIMA_PER_ROW = 1024, 1024
    res.append(f"general {per_instance_us(g, copies=5):.1f}")
    f(); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            f()
        torch.cuda.synchronize()
    ks = {e.key: e.device_time_total / e.count for e in prof.key_averages() if e.device_time_total > 0}
    print(f"B={B}: " + ", ".join(res) + " | " + ", ".join(f"{k[:22]} {v:.1f}" for k, v in ks.items()), flush=True)
