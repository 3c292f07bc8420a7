import sys, torch, triton
sys.path.insert(0, "benchmarks")
from _timing import per_instance_us
import stepgraph.kernels.chain_sampling as cs
from stepgraph.kernels.chain_sampling import chain_verify_sampling
dev="cuda"; K=3; V=151936
orig = cs.split_layout
def layout_with(per_row):
    def f(rows, vocab):
        split = triton.cdiv(triton.cdiv(vocab, per_row), 1024) * 1024
        return triton.cdiv(vocab, split), split
    return f
for B in (1, 8, 64):
    x = torch.randn(B, K + 1, V, device=dev).bfloat16()
    d = torch.argmax(x, -1)[:, :K].contiguous()
    T = torch.full((B,), 0.8, device=dev); tk = torch.full((B,), 50, device=dev, dtype=torch.int64)
    tp = torch.full((B,), 0.9, device=dev); mp = torch.zeros(B, device=dev)
    seed = torch.arange(B, device=dev, dtype=torch.int64); off = torch.zeros(B, device=dev, dtype=torch.int64)
    f = lambda: chain_verify_sampling(x, d, T, tk, tp, seed, off, min_p=mp, small_top_k=True)
    out = [f"now {orig(B * (K + 1), V)}: {per_instance_us(f, copies=5):.1f}"]
    for per_row in (8, 16, 32, 48, 64):
        cs.split_layout = layout_with(per_row)
        out.append(f"{per_row}: {per_instance_us(f, copies=5):.1f}")
    cs.split_layout = orig
    print(f"B={B}: " + ", ".join(out), flush=True)
