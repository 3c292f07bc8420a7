"""A design for the filtered class's sampled verify without the kept set's cut (issue 33), checked on the CPU.

1. The chain rule with one-hot drafts (accept ``d`` with probability ``q(d)``; on rejection emit a sample of
   ``q`` without ``d``) equals: draw ``y_j ~ q_j`` for every row, emit the drafts while ``y_j == d_{j+1}``,
   then the first ``y_j`` that differs (or the bonus ``y_K``). Checked here against
   ``chain_verify_sampling_ref`` on small rows with ties, by the distribution of the emitted tokens.
2. One ``y ~ q`` when the kept set is an upper set of keys (top-p, top-k, min-p all are), by rejection with
   a rising pivot: draw ``y`` from the weights of keys ``>= lo`` (``lo`` starts below every key); ``y`` is
   kept iff the float64 mass of strictly larger keys is ``< top_p *`` the total, else ``lo = key(y) + 1``
   and draw again. Each round is an inverse-CDF pass and a mass pass; no cut is ever found. Counted here:
   how many rounds rows of 151,936 bf16 logits take (flat: ``randn``; peaked: ``4 * randn``).

    python benchmarks/results/2026-12-02-cpu-sample-prefix/probe_sample_prefix.py
"""

from collections import Counter

import torch

from stepgraph.kernels.chain_sampling_ref import chain_verify_sampling_ref, kept_mask, sampling_probs, sortable_keys


def pivot_sample(x, temp, top_p, gen):
    """One draw of q (top-p alone) by the rising pivot; returns (token, rounds)."""
    z = x.float() / temp
    w = torch.exp(z - z.max()).double()
    key = sortable_keys(x)
    total = w.sum()
    lo, rounds = torch.iinfo(torch.int64).min, 0
    while True:
        rounds += 1
        cand = torch.where(key >= lo, w, torch.zeros_like(w))
        u = torch.rand((), generator=gen, dtype=torch.float64) * cand.sum()
        y = int(torch.searchsorted(torch.cumsum(cand, 0), u, right=True).clamp(max=len(w) - 1))
        if w[key > key[y]].sum() < top_p * total:
            return y, rounds
        lo = int(key[y]) + 1


def check_coupling(samples=60000):
    """Distribution of (accepted, final token) of the reference chain and of the per-row draws."""
    g = torch.Generator().manual_seed(0)
    K, V = 2, 12
    x = (torch.randn(1, K + 1, V, generator=g) * 1.5).round(decimals=0)  # ties
    d = torch.tensor([[int(x[0, 0].argmax()), int(x[0, 1].argsort()[-2])]])
    T, tk, tp, mp = torch.tensor([0.9]), torch.tensor([0]), torch.tensor([0.8]), torch.tensor([0.0])
    ref = Counter()
    seeds = torch.arange(samples)
    for s in range(samples):
        out = chain_verify_sampling_ref(x, d, T, tk, tp, seeds[s : s + 1], torch.zeros(1, dtype=torch.long), min_p=mp)
        ref[tuple(out.tokens[0].tolist())] += 1
    q = sampling_probs(x, T, tk, tp, min_p=mp)[0]  # [K + 1, V]
    ys = torch.multinomial(q, samples, replacement=True, generator=g)  # [K + 1, samples]: y_j ~ q_j
    new = Counter()
    for s in range(samples):
        toks, n = [], 0
        while n < K and int(ys[n, s]) == int(d[0, n]):
            toks.append(int(d[0, n]))
            n += 1
        toks.append(int(ys[n, s]))
        new[tuple(toks + [-1] * (K + 1 - len(toks)))] += 1
    keys = sorted(set(ref) | set(new))
    chi2 = sum((ref[k] - new[k]) ** 2 / (ref[k] + new[k]) for k in keys if ref[k] + new[k] > 0)
    print(f"coupling: {len(keys)} outcomes, two-sample chi-square {chi2:.1f} on {len(keys) - 1} degrees of freedom")
    for k in keys[:8]:
        print(f"  {k}: reference {ref[k] / samples:.4f}, per-row draws {new[k] / samples:.4f}")


def check_pivot_distribution(samples=40000):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(40, generator=g) * 2).round(decimals=0).bfloat16()  # ties at the cut
    q = sampling_probs(x.view(1, 1, -1), torch.tensor([1.0]), torch.tensor([0]), torch.tensor([0.7]))[0, 0]
    got = Counter(pivot_sample(x, 1.0, 0.7, g)[0] for _ in range(samples))
    tv = 0.5 * sum(abs(got[i] / samples - float(q[i])) for i in range(40))
    kept = int(kept_mask(x.view(1, 1, -1), torch.tensor([1.0]), torch.tensor([0]), torch.tensor([0.7])).sum())
    outside = sum(c for i, c in got.items() if q[i] == 0)
    print(
        f"pivot sampler, 40 logits with ties, top-p 0.7: {kept} kept, total variation to q {tv:.4f}, "
        f"draws outside the kept set {outside}"
    )


def count_rounds(rows=200):
    g = torch.Generator().manual_seed(2)
    for scale, temp in ((1.0, 0.8), (1.0, 1.0), (4.0, 0.8), (4.0, 0.6)):
        rounds = Counter()
        for _ in range(rows):
            x = (torch.randn(151936, generator=g) * scale).bfloat16()
            rounds[pivot_sample(x, temp, 0.9, g)[1]] += 1
        mean = sum(r * c for r, c in rounds.items()) / rows
        print(
            f"rows {scale} * randn, temperature {temp}, top-p 0.9: rounds {dict(sorted(rounds.items()))}, "
            f"mean {mean:.2f}"
        )


if __name__ == "__main__":
    check_coupling()
    check_pivot_distribution()
    count_rounds()
