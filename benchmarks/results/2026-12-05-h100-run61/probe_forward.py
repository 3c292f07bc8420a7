"""One twin forward (Qwen3-0.6B shape, bf16, B=8, T=6): kernels, host enqueue time, graph replay time."""
import sys, time
from collections import Counter
import torch
from stepgraph.examples import model as M
print("model from", M.__file__)
dev = "cuda"
target, _ = M.build("qwen3-0.6b", device=dev, dtype=torch.bfloat16, attention=sys.argv[1] if len(sys.argv) > 1 else "sdpa")
cfg = target.cfg
for B, T in ((8, 6), (1, 6), (8, 1)):
    tok = torch.randint(0, cfg.vocab_size, (B, T), device=dev)
    pos = (torch.arange(T, device=dev) + 40)[None].expand(B, T).contiguous()
    rows = torch.arange(B, device=dev)
    with torch.inference_mode():
        for _ in range(3):
            target(tok, pos, rows)
        torch.cuda.synchronize()
        host = []
        for _ in range(30):
            t0 = time.perf_counter()
            target(tok, pos, rows)
            host.append(time.perf_counter() - t0)
            torch.cuda.synchronize()
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            target(tok, pos, rows)
            torch.cuda.synchronize()
        kern = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            target(tok, pos, rows)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = target(tok, pos, rows)
        t0 = time.perf_counter(); g.replay(); torch.cuda.synchronize()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        for _ in range(5):
            g.replay()
        ev[0].record()
        for _ in range(50):
            g.replay()
        ev[1].record(); torch.cuda.synchronize()
        print(f"B={B} T={T}: kernels/forward {len(kern)} ({len(kern)/cfg.num_layers:.1f}/layer), host enqueue "
              f"min {min(host)*1e6:.0f} µs median {sorted(host)[15]*1e6:.0f} µs, graph replay {ev[0].elapsed_time(ev[1])/50*1e3:.1f} µs")
        if B == 8 and T == 6:
            for name, n in Counter(e.name[:100] for e in kern).most_common(30):
                print(f"   {n:4d} x {name}")
        del g
# the additive mask against the boolean one, through SDPA (bit for bit)
B, T, S = 8, 6, cfg.max_seq_len
g = torch.Generator(device=dev).manual_seed(1)
q = torch.randn(B, cfg.num_heads, T, cfg.head_dim, device=dev, generator=g).bfloat16()
k = torch.randn(B, cfg.num_kv_heads, S, cfg.head_dim, device=dev, generator=g).bfloat16()
v = torch.randn(B, cfg.num_kv_heads, S, cfg.head_dim, device=dev, generator=g).bfloat16()
pos = torch.randint(5, S, (B, T), device=dev)
keyp = torch.arange(S, device=dev)
boolm = keyp[None, None, None, :] <= pos[:, None, :, None]
addm = torch.zeros(boolm.shape, device=dev, dtype=torch.bfloat16).masked_fill_(~boolm, float("-inf"))
a = M._masked_sdpa(q, k, v, boolm)
b = M._masked_sdpa(q, k, v, addm)
print("SDPA boolean vs additive mask: bit-equal", torch.equal(a, b), "max diff", (a.float() - b.float()).abs().max().item())
