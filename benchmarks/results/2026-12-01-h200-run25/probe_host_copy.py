"""Host cost of copying a host source's rows into a pinned ring buffer: ctypes.memmove against slices of
ADDRESS_SPACE (run 25). Prints ns per copy (best of 30 repeats of 20000) and the bare replay of a small
graph, which tells the host kind apart."""

import ctypes
import time
import timeit

import torch

from stepgraph.kernels._address_space import ADDRESS_SPACE

ring = torch.zeros(16 * 4096, dtype=torch.uint8, pin_memory=True)
raw = memoryview(ring.numpy())
dst = ring.data_ptr() + 128
g = {"mm": ctypes.memmove, "raw": raw, "M": ADDRESS_SPACE, "dst": dst}
for size, src in ((24, torch.ones(3, dtype=torch.int64)), (6144, torch.ones(3, 1024, dtype=torch.bfloat16))):
    g.update(p=src.data_ptr(), n=size)
    stmts = {"empty": "pass", "ctypes.memmove": "mm(dst, p, n)", "ADDRESS_SPACE slice": "raw[128:128 + n] = M[p:p + n]"}
    best = {k: min(timeit.Timer(s, globals=g).repeat(repeat=30, number=20000)) / 20000 * 1e9 for k, s in stmts.items()}
    print(f"{size} B: " + ", ".join(f"{k} {v - best['empty']:.0f} ns" for k, v in best.items() if k != "empty"))

x = torch.zeros(64, device="cuda")
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    x.add_(1)
for _ in range(100):
    graph.replay()
times = []
for _ in range(400):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    graph.replay()
    times.append((time.perf_counter() - t0) * 1e6)
print(f"bare replay us {sorted(times)[200]:.2f}")
