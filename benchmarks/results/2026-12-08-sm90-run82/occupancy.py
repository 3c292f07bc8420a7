"""Each compiled variant of the sampled verify's kernels after a general-class call at B = 8: registers, spills,
shared memory, local memory a thread, and the CTAs an SM holds (the driver's occupancy), to test whether the
branch's launches cost 0.9 µs more at B = 8 (960 programs, two waves at five an SM) for fewer CTAs an SM."""
import ctypes, sys
import torch
from stepgraph.kernels.chain_sampling import chain_verify_sampling
from stepgraph.kernels import _sampling_mass as M, _sampling_pivot as P
label = sys.argv[1]
K, V, B, dev = 3, 151936, 8, "cuda"
torch.manual_seed(0)
x = torch.randn(B, K + 1, V, device=dev).bfloat16()
d = torch.argmax(x.float(), -1)[:, :K].contiguous()
T = torch.full((B,), 0.8, device=dev); tk = torch.full((B,), 2000, device=dev, dtype=torch.int64)
tp = torch.full((B,), 0.9, device=dev); seed = torch.arange(B, device=dev, dtype=torch.int64)
off = torch.zeros(B, device=dev, dtype=torch.int64)
chain_verify_sampling(x, d, T, tk, tp, seed, off, filtered=True, small_top_k=False, pivot=True, late=True)
torch.cuda.synchronize()
cuda = ctypes.CDLL("libcuda.so.1")
def attr(f, a):
    v = ctypes.c_int(); cuda.cuFuncGetAttribute(ctypes.byref(v), ctypes.c_int(a), ctypes.c_void_p(f)); return v.value
for name, fn in (("stats", P._stats_kernel), ("round", M._round_kernel), ("kept", M._kept_mass_kernel)):
    for cache in fn.device_caches.values():
        for i, k in enumerate(cache[0].values()):  # in the order of first launch
            k._init_handles()
            n = ctypes.c_int()
            cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), ctypes.c_void_p(k.function),
                                                             128 if k.metadata.num_warps == 4 else 32 * k.metadata.num_warps,
                                                             ctypes.c_size_t(k.metadata.shared))
            print(label, name, i, "regs", k.n_regs, "spills", k.n_spills, "shared", k.metadata.shared, "local",
                  attr(k.function, 3), "const", attr(k.function, 2), "ctas/SM", n.value, flush=True)
