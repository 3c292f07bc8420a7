import sys, torch
sys.path.insert(0, "benchmarks")
from _timing import per_instance_us
import stepgraph.kernels._sampling_topk as st
from stepgraph.kernels.chain_sampling import chain_verify_sampling
dev="cuda"; K=3; V=151936
for B in (1, 8, 64):
    x = torch.randn(B, K + 1, V, device=dev).bfloat16()
    d = torch.argmax(x, -1)[:, :K].contiguous()
    T = torch.full((B,), 0.8, device=dev); tk = torch.full((B,), 50, device=dev, dtype=torch.int64)
    tp = torch.full((B,), 0.9, device=dev); mp = torch.zeros(B, device=dev)
    seed = torch.arange(B, device=dev, dtype=torch.int64); off = torch.zeros(B, device=dev, dtype=torch.int64)
    f = lambda: chain_verify_sampling(x, d, T, tk, tp, seed, off, min_p=mp, small_top_k=True)
    out = []
    for lim in (10**6, 0):
        for blk, w in ((1024, 4), (2048, 4), (2048, 8), (4096, 8)):
            st.RADIX8_MAX_ROWS = lim
            st.PASS_BLOCK, st.PASS_WARPS = blk, w
            out.append(f"d{8 if lim else 4}/{blk}/{w}: {per_instance_us(f, copies=5):.1f}")
    print(f"B={B}: " + ", ".join(out), flush=True)
