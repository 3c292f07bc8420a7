"""CPU analysis (run 83): how many attempts of four candidates the `general` class's late rows need, on the rows
`ab.py` times (bf16 `s * randn`, V = 151,936, K = 3, temperature 0.8, top-k 2000), by the reference's rule
(`chain_sampling_ref.pivot_draws`, its loop repeated here with the attempt each row ends at recorded).

With LATE_STEPS = n a late row makes n - 1 attempts by passes over its row; one that needs more goes on alone in
the last launch (one program's pass over the row an attempt).

    python benchmarks/results/2026-12-08-sm90-run83/attempts.py
"""
import torch

from stepgraph.kernels.chain_sampling_ref import PIVOT_ROUNDS, PIVOT_SAMPLES, _weights, sortable_keys
from stepgraph.kernels.philox import philox_uniform, pivot_counter, verify_stream

B, K, V = 64, 3, 151936
K1 = K + 1


def attempts(x, T, k, p, seed, offset):
    """``[B, K1]`` int64: the attempt (1-based) at which each late row keeps a candidate, 0 past PIVOT_ROUNDS."""
    w32 = _weights(x, T)
    w = w32.double()
    key = sortable_keys(x)
    kth = torch.sort(key, dim=-1, descending=True).values[..., k - 1 : k]
    lo = kth.clone()
    goal = p * torch.where(key >= lo, w, 0.0).sum(-1, keepdim=True)
    stream = verify_stream(offset, K1).view(B, 1, 1)
    rows = torch.arange(K1).view(1, K1, 1)
    cands = torch.arange(PIVOT_SAMPLES)
    at = torch.zeros((B, K1), dtype=torch.long)
    done = torch.zeros((B, K1), dtype=torch.bool)
    for rnd in range(PIVOT_ROUNDS):
        u = philox_uniform(seed.view(B, 1, 1), stream | pivot_counter(K1, rnd * PIVOT_SAMPLES + cands, rows))
        cdf = torch.cumsum(torch.where(key >= lo, w, 0.0), -1)
        pick = torch.searchsorted(cdf, u.double() * cdf[..., -1:], right=True).clamp(max=V - 1)
        k_c = key.gather(-1, pick)
        above = torch.stack([torch.where(key > k_c[..., c, None], w, 0.0).sum(-1) for c in range(PIVOT_SAMPLES)], -1)
        larger = torch.stack([(key > k_c[..., c, None]).sum(-1) for c in range(PIVOT_SAMPLES)], -1)
        hit = ((above < goal) & (larger < k)).any(-1)
        at = torch.where(~done & hit, rnd + 1, at)
        lo = torch.where((done | hit)[..., None], lo, k_c.amax(-1, keepdim=True) + 1)
        done = done | hit
        if bool(done.all()):
            break
    return at


for s in (1.0, 4.0):
    torch.manual_seed(0)
    x = (torch.randn(B, K1, V) * s).bfloat16()
    for p in (0.9, 0.5, 0.3):
        counts = torch.zeros(PIVOT_ROUNDS + 1, dtype=torch.long)
        for o in range(4):
            a = attempts(x, torch.full((B, 1, 1), 0.8), 2000, p, torch.arange(B, dtype=torch.int64), torch.full((B,), o))
            counts += torch.bincount(a.flatten(), minlength=PIVOT_ROUNDS + 1)
        n = int(counts.sum())
        share = ", ".join(f"{r}: {100 * int(counts[r]) / n:.2f}%" for r in range(1, PIVOT_ROUNDS + 1) if counts[r])
        print(f"s={s} top-p {p}: rows {n}, ended at attempt {share}, none within {PIVOT_ROUNDS}: {int(counts[0])}")
