"""Probe for ncu: the general class (top-k 2000 + top-p 0.9, peaked bf16 rows) at one batch size, a few eager calls."""
import sys
import torch
from stepgraph.kernels.chain_sampling import chain_verify_sampling

B = int(sys.argv[1]) if len(sys.argv) > 1 else 8
K, V, dev = 3, 151936, "cuda"
GENERAL = {"filtered": True, "small_top_k": False, "pivot": True, "late": True}
torch.manual_seed(0)
x = (torch.randn(B, K + 1, V, device=dev) * 4).to(torch.bfloat16)
d = torch.argmax(x.float(), -1)[:, :K].contiguous()
T = torch.full((B,), 0.8, device=dev)
tk = torch.full((B,), 2000, device=dev, dtype=torch.int64)
tp = torch.full((B,), 0.9, device=dev)
seed = torch.arange(B, device=dev, dtype=torch.int64)
off = torch.zeros(B, device=dev, dtype=torch.int64)
for _ in range(3):
    chain_verify_sampling(x, d, T, tk, tp, seed, off, **GENERAL)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
chain_verify_sampling(x, d, T, tk, tp, seed, off, **GENERAL)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
