import sys
from pathlib import Path
import torch
sys.path.insert(0, "benchmarks")
from _timing import per_instance_us
import stepgraph
from stepgraph.kernels.chain_sampling import chain_verify_sampling
K, V = 3, 151_936
def inputs(B, k, p):
    torch.manual_seed(0)
    x = torch.randn(B, K + 1, V, device="cuda").bfloat16()
    d = torch.argmax(x, -1)[:, :K].contiguous()
    return (x, d, torch.full((B,), 0.8, device="cuda"), torch.full((B,), k, dtype=torch.int64, device="cuda"),
            torch.full((B,), p, device="cuda"), torch.arange(B, device="cuda"), torch.zeros(B, dtype=torch.int64, device="cuda"))
for B in (64,):
    for k, p in ((2000, 0.9), (0, 0.9)):
        args = inputs(B, k, p)
        us = per_instance_us(lambda args=args: chain_verify_sampling(*args, filtered=True, pivot=True))
        print(sys.argv[1], stepgraph.__file__.split("/")[-3], f"B={B} k={k} {us:.1f} us", flush=True)
