"""Which SDPA backend the example model's masked GQA attention takes on this GPU, and its host/device time;
and whether a kept graph's replay instantiates by itself."""
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

dev = "cuda"
for B, T in ((1, 6), (8, 6), (8, 2)):
    H, KVH, S, hd = 16, 8, 1024, 128
    q = torch.randn(B, H, T, hd, device=dev, dtype=torch.bfloat16)
    k = torch.randn(B, KVH, S, hd, device=dev, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    pos = torch.randint(100, 900, (B, T), device=dev)
    mask = torch.arange(S, device=dev)[None, None, None, :] <= pos[:, None, :, None]
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    kx = k.repeat_interleave(H // KVH, 1)
    vx = v.repeat_interleave(H // KVH, 1)
    for name, fn in (("gqa", lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)),
                     ("expanded", lambda: F.scaled_dot_product_attention(q, kx, vx, attn_mask=mask))):
        ok = []
        for be in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH):
            try:
                with sdpa_kernel([be]):
                    out = fn()
                ok.append(f"{be.name}:{(out.float() - ref.float()).abs().max().item():.3g}")
            except RuntimeError as e:
                ok.append(f"{be.name}:no")
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(200):
            fn()
        host = (time.perf_counter() - t0) / 200 * 1e6
        torch.cuda.synchronize()
        dev_t = (time.perf_counter() - t0) / 200 * 1e6
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        kernels = [e.name[:60] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        print(f"B={B} T={T} {name}: host {host:.0f} us/call, to device end {dev_t:.0f} us/call; backends {ok}; kernels {kernels}")

g = torch.cuda.CUDAGraph(keep_graph=True)
x = torch.zeros(4, device=dev)
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    g.capture_begin()
    x.add_(1)
    g.capture_end()
try:
    g.replay()
    torch.cuda.synchronize()
    print("kept graph replay without instantiate():", x.tolist())
except Exception as e:
    print("kept graph replay without instantiate() raised:", type(e).__name__, str(e)[:200])

# host time of one call: SDPA direct, through torch.library.custom_op, through define/impl
from stepgraph.examples.model import _masked_sdpa  # noqa: E402

lib = torch.library.Library("sgprobe", "DEF")
lib.define("masked(Tensor q, Tensor k, Tensor v, Tensor mask) -> Tensor")
lib.impl("masked", _masked_sdpa, "CUDA")
B, T, H, KVH, S, hd = 8, 6, 16, 8, 1024, 128
q = torch.randn(B, H, T, hd, device=dev, dtype=torch.bfloat16)
k = torch.randn(B, KVH, S, hd, device=dev, dtype=torch.bfloat16)
v = torch.randn_like(k)
mask = torch.arange(S, device=dev)[None, None, None, :] <= torch.randint(100, 900, (B, 1, T, 1), device=dev)
with torch.inference_mode():
    for name, fn in (("direct", lambda: _masked_sdpa(q, k, v, mask)),
                     ("custom_op", lambda: torch.ops.stepgraph.masked_attention(q, k, v, mask)),
                     ("define/impl", lambda: torch.ops.sgprobe.masked(q, k, v, mask))):
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        best = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(100):
                fn()
            best.append((time.perf_counter() - t0) / 100 * 1e6)
            torch.cuda.synchronize()
        print(f"host per call, {name}: {min(best):.1f} us (min of 5 x 100)")
