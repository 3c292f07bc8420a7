import sys, torch
from stepgraph.kernels import chain_sampling_ref as R
from stepgraph.kernels.philox import philox_uniform, pivot_counter
from stepgraph.kernels._sampling_filter import *  # noqa
def counts(logits, T, k, p, seed, offset):
    B, K1, V = logits.shape
    w32 = R._weights(logits, T); w = w32.double(); key = R.sortable_keys(logits)
    kk = k.long().view(B,1)
    lo = torch.full((B, K1, 1), -(2**62), dtype=torch.long, device=logits.device)
    goal_p = p.double().view(B,1) * torch.where(key >= lo, w, 0.0).sum(-1)
    stream = R.verify_stream(offset, K1)[:, None]; rows = torch.arange(K1, device=logits.device)[None, :]
    done = torch.zeros((B,K1), dtype=torch.bool, device=logits.device); n = torch.zeros((B,K1), dtype=torch.long, device=logits.device)
    for rnd in range(64):
        u = philox_uniform(seed.long()[:, None], stream | pivot_counter(K1, rnd, rows))
        cdf = torch.cumsum(torch.where(key >= lo, w, 0.0), -1)
        pick = torch.searchsorted(cdf, (u.double() * cdf[..., -1])[..., None], right=True).clamp(max=V - 1)
        if rnd == 0: pick = R.first_pivot_draw(logits, T, u)[..., None]
        k_y = key.gather(-1, pick)
        above = torch.where(key > k_y, w, 0.0).sum(-1); larger = (key > k_y).sum(-1)
        kept = ((above < goal_p) | (p.view(B,1) >= 1)) & ((larger < kk) | (kk <= 0))
        n += (~done).long()
        lo = torch.where((done | kept)[..., None], lo, k_y + 1); done = done | kept
        if bool(done.all()): break
    return n
V=151936
dev = sys.argv[1] if len(sys.argv) > 1 else "cpu"
for s,k,p in [(1.0,2000,1.0),(1.0,0,0.5),(1.0,0,0.9),(0.6,1000,1.0)]:
  for B in (1,8,64):
    torch.manual_seed(0)
    x = (torch.randn(B, 4, V, device=dev) * s).bfloat16()
    f = lambda *a: torch.full((B,), a[0], device=dev)
    n = counts(x, f(0.8), f(k).long(), f(p), torch.arange(B, device=dev), torch.zeros(B,dtype=torch.long, device=dev))
    print(f"s={s} k={k} p={p} B={B} draws hist", torch.bincount(n.flatten()).tolist(), flush=True)
