"""Where the top-p search's rounds spend their reads: for rows as ``bench_kernels.py`` draws them (bf16
``S * randn`` over 151,936 logits), the entries and the 1024-entry blocks inside the search interval
before each round of the top-p phase (16-bit keys, 16 buckets a round, as ``_sampling_filter`` searches).

    python probe_live_per_round.py   # CPU, a few seconds
"""

import torch

V, BLOCK, ROWS = 151936, 1024, 8


def sortable_key16(x: torch.Tensor) -> torch.Tensor:
    """The kernels' sortable key of float32 ``x`` (from bf16), in the 16-bit domain."""
    i = x.view(torch.int32).to(torch.int64)
    return torch.where(i >= 0, i, i ^ 0x7FFFFFFF) >> 16


def rounds(x: torch.Tensor, top_p: float, temperature: float) -> tuple[list[int], list[int], int]:
    """Entries and live blocks before each round, and the kept count."""
    key = sortable_key16(x)
    z = x / temperature
    w = torch.exp((z - z.max()).double())
    lo, hi, g_hi = int(key.min()), int(key.max()) + 1, 0.0
    target = top_p * float(w.sum())
    entries, blocks = [], []
    while hi - lo > 1:
        live = (key >= lo) & (key < hi)
        entries.append(int(live.sum()))
        blocks.append(int(torch.nn.functional.pad(live, (0, -V % BLOCK)).view(-1, BLOCK).any(1).sum()))
        s = 0
        while (16 << s) < hi - lo:
            s += 1
        step = 1 << s
        hist = torch.zeros(16, dtype=torch.float64).index_add_(0, (key[live] - lo) >> s, w[live])
        g_at = g_hi + hist.flip(0).cumsum(0).flip(0)  # G(lo + step * bucket)
        ok = (lo + step * torch.arange(16) < hi) & (g_at >= target)
        b = int(torch.nonzero(ok).max())
        has_hi = b + 1 < 16 and lo + step * (b + 1) < hi
        lo, hi, g_hi = lo + step * b, (lo + step * (b + 1) if has_hi else hi), (float(g_at[b + 1]) if has_hi else g_hi)
    return entries, blocks, int((key >= lo).sum())


print(f"# Top-p 0.9 search, {ROWS} rows of {V} bf16 logits each: mean per round\n")
print("| logit scale | temperature | entries in the interval, per round | of 149 blocks, live per round | kept |")
print("| --- | --- | --- | --- | --- |")
g = torch.Generator().manual_seed(0)
for scale in (1.0, 4.0):
    for temperature in (1.0, 0.6):
        runs = [rounds((torch.randn(V, generator=g) * scale).bfloat16().float(), 0.9, temperature) for _ in range(ROWS)]
        n = max(len(e) for e, _, _ in runs)
        mean = lambda i, j: round(sum(r[j][i] if i < len(r[j]) else 0 for r in runs) / ROWS)  # noqa: E731
        entries = ", ".join(str(mean(i, 0)) for i in range(n))
        blocks = ", ".join(str(mean(i, 1)) for i in range(n))
        kept = round(sum(r[2] for r in runs) / ROWS)
        print(f"| {scale} | {temperature} | {entries} | {blocks} | {kept} |")
