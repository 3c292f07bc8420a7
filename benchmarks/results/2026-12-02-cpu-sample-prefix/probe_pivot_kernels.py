"""What the rising-pivot draw of the top-p law (NOTES.md, fact 2) costs on the GPU: its passes as Triton kernels,
timed against today's top-p-alone sampled verify on the rows ``bench_kernels.py`` draws. Not the verify itself
(no chain walk, no third round, no float64-exact definition work beyond the check): the price of its passes.

Launches per instance: two fills (the pivot and the done flags), the statistics pass of today's filtered
class (``x / T`` max per split), then ``mass`` (float64 total per split), ``draw`` (round 1), ``mass`` (the
mass of keys above the draw), ``draw`` (decides round 1; round 2 for the rows it rejects), ``mass`` (round
2's check), ``draw`` (decides round 2; a third draw for the rare row it rejects, not checked).

On the CPU (``TRITON_INTERPRET=1``) it checks the kernels' draws against the same procedure in torch on
small rows; on a GPU it also times them:

    TRITON_INTERPRET=1 python benchmarks/results/2026-12-02-cpu-sample-prefix/probe_pivot_kernels.py
    python benchmarks/results/2026-12-02-cpu-sample-prefix/probe_pivot_kernels.py      # on the H200
"""

import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, "benchmarks")

from stepgraph.kernels._argmax import sortable_key  # noqa: E402
from stepgraph.kernels._common import EXACT_ROUNDING, next_pow2  # noqa: E402
from stepgraph.kernels._sampling_filter import BLOCK, _stats_kernel, key_shift  # noqa: E402
from stepgraph.kernels.chain_sampling import chain_verify_sampling, split_layout  # noqa: E402
from stepgraph.kernels.chain_sampling_ref import sortable_keys  # noqa: E402

NONE_KEY = -(2**31)  # below every key


@triton.jit
def _row_max(zmax_ptr, row, n_splits, NS_P2: tl.constexpr):
    sp = tl.arange(0, NS_P2)
    return tl.max(tl.load(zmax_ptr + row * n_splits + sp, mask=sp < n_splits, other=float("-inf")), axis=0)


@triton.jit
def _mass_kernel(logits_ptr, stride_b, stride_j, temp_ptr, zmax_ptr, lo_ptr, done_ptr, part_ptr, V, K1, n_splits,
                 SPLIT, BLOCK: tl.constexpr, NS_P2: tl.constexpr, SHIFT: tl.constexpr):  # fmt: skip
    """Per (row, split) of a row not done: the float64 mass ``exp(x / T - m)`` of the split's keys ``>= lo``."""
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    if tl.load(done_ptr + row) == 0:
        b = row // K1
        inv_t = 1.0 / tl.load(temp_ptr + b).to(tl.float32)
        m = _row_max(zmax_ptr, row, n_splits, NS_P2)
        lo = tl.load(lo_ptr + row)
        base = logits_ptr + b * stride_b + (row % K1) * stride_j
        acc = tl.zeros([BLOCK], tl.float64)
        start = sp * SPLIT
        for i in range(0, SPLIT, BLOCK):
            offs = start + i + tl.arange(0, BLOCK)
            inb = offs < V
            x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
            live = inb & ((sortable_key(x) >> SHIFT) >= lo)
            acc += tl.where(live, tl.exp(x * inv_t - m), 0.0).to(tl.float64)
        tl.store(part_ptr + row * n_splits + sp, tl.sum(acc, axis=0))


@triton.jit
def _draw_kernel(logits_ptr, stride_b, stride_j, temp_ptr, topp_ptr, zmax_ptr, lo_ptr, done_ptr, part_ptr,
                 total_ptr, u_ptr, y_ptr, FIRST: tl.constexpr, V, K1, n_splits, SPLIT,
                 BLOCK: tl.constexpr, NS_P2: tl.constexpr, SHIFT: tl.constexpr):  # fmt: skip
    """One program per row not done. Unless ``FIRST``: the last draw is kept when the mass above it (the split
    masses just summed, over keys ``>= lo``, its key + 1) is ``< top_p *`` the total, and the row is done.
    Else a draw from the keys ``>= lo`` by inverse CDF (the split from the split masses, the entry from a
    scan of it); ``lo`` becomes its key + 1, for the next mass pass."""
    row = tl.program_id(0).to(tl.int64)
    if tl.load(done_ptr + row) == 0:
        b = row // K1
        sp = tl.arange(0, NS_P2)
        part = tl.load(part_ptr + row * n_splits + sp, mask=sp < n_splits, other=0.0)
        mass = tl.sum(part, axis=0)
        if FIRST:
            tl.store(total_ptr + row, mass)
            go = True
        else:
            go = mass >= tl.load(topp_ptr + b).to(tl.float64) * tl.load(total_ptr + row)
            if not go:
                tl.store(done_ptr + row, 1)
        if go:
            inv_t = 1.0 / tl.load(temp_ptr + b).to(tl.float32)
            m = _row_max(zmax_ptr, row, n_splits, NS_P2)
            lo = tl.load(lo_ptr + row)
            goal = tl.load(u_ptr + row).to(tl.float64) * mass
            cum = tl.cumsum(part, axis=0)
            last = tl.max(tl.where(part > 0, sp, 0), axis=0)
            chosen = tl.minimum(tl.min(tl.where(cum > goal, sp, NS_P2), axis=0), last)
            local = goal - tl.sum(tl.where(sp < chosen, part, 0.0), axis=0)
            base = logits_ptr + b * stride_b + (row % K1) * stride_j
            token = chosen * 0 - 1
            run = mass * 0.0
            start = chosen * SPLIT
            for i in range(0, SPLIT, BLOCK):
                if token < 0:
                    offs = start + i + tl.arange(0, BLOCK)
                    inb = offs < V
                    x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
                    live = inb & ((sortable_key(x) >> SHIFT) >= lo)
                    w = tl.where(live, tl.exp(x * inv_t - m), 0.0).to(tl.float64)
                    c = tl.cumsum(w, axis=0) + run
                    hit = tl.min(tl.where(live & (c > local), offs, 2147483647), axis=0)
                    token = tl.where(hit < 2147483647, hit, token)
                    run += tl.sum(w, axis=0)
            token = tl.maximum(token, 0)  # a goal past the float sums: rounding (the probe ignores it)
            x_y = tl.load(base + token).to(tl.float32)
            tl.store(y_ptr + row, token)
            tl.store(lo_ptr + row, (sortable_key(x_y) >> SHIFT) + 1)  # the next mass pass: the mass above it


def pivot_draws(logits, temperature, top_p, u1, u2):
    """Two rounds of the rising pivot for every row of ``logits [B, K1, V]``: ``(token [rows], done [rows])``
    (done: the draw of round 1 or 2 is in the top-p set)."""
    B, K1, V = logits.shape
    rows, dev = B * K1, logits.device
    n_splits, split = split_layout(rows, V)
    ns_p2, shift = next_pow2(n_splits), key_shift(logits.dtype)
    gkey, gidx, kmin, kmax = (torch.empty((rows, n_splits), dtype=torch.int32, device=dev) for _ in range(4))
    zmax = torch.empty((rows, n_splits), dtype=torch.float32, device=dev)
    part = torch.empty((rows, n_splits), dtype=torch.float64, device=dev)
    total = torch.empty(rows, dtype=torch.float64, device=dev)
    lo = torch.full((rows,), NONE_KEY, dtype=torch.int32, device=dev)
    done = torch.zeros(rows, dtype=torch.int32, device=dev)
    y = torch.empty(rows, dtype=torch.int32, device=dev)
    head = (logits, logits.stride(0), logits.stride(1))
    grid = (rows, n_splits)
    sizes = dict(SPLIT=split, BLOCK=BLOCK, NS_P2=ns_p2, SHIFT=shift, num_warps=4, **EXACT_ROUNDING)
    _stats_kernel[grid](*head, temperature, gkey, gidx, zmax, kmin, kmax, V, K1, n_splits, SPLIT=split, BLOCK=BLOCK,
                        SHIFT=shift, num_warps=4, **EXACT_ROUNDING)  # fmt: skip
    mass = lambda: _mass_kernel[grid](*head, temperature, zmax, lo, done, part, V, K1, n_splits, **sizes)  # noqa: E731

    def draw(u, first):
        _draw_kernel[(rows,)](*head, temperature, top_p, zmax, lo, done, part, total, u, y, first, V, K1,
                              n_splits, **sizes)  # fmt: skip

    mass()
    draw(u1, True)
    mass()
    draw(u2, False)
    mass()
    draw(u2, False)  # decides round 2 (a third draw for the rare row it rejects)
    return y, done


def pivot_draws_ref(logits, temperature, top_p, u1, u2):
    """The same rounds in torch (float64 cumsum in vocabulary order)."""
    B, K1, V = logits.shape
    x = logits.float().reshape(B * K1, V)
    z = x * (1.0 / temperature.float().repeat_interleave(K1))[:, None]
    w = torch.exp(z - z.amax(-1, keepdim=True)).double()
    key = sortable_keys(logits).reshape(B * K1, V)
    p = top_p.double().repeat_interleave(K1)
    total = w.sum(-1)
    lo = torch.full((B * K1, 1), NONE_KEY, dtype=torch.long)
    ys, done = torch.zeros(B * K1, dtype=torch.long), torch.zeros(B * K1, dtype=torch.bool)
    for r, u in enumerate((u1, u2, u2)):  # the kernels' last launch draws a third time for rows not done
        cand = torch.where(key >= lo, w, 0.0)
        goal = u.double() * cand.sum(-1)
        y = torch.searchsorted(torch.cumsum(cand, -1), goal[:, None], right=True).clamp(max=V - 1)[:, 0]
        ys = torch.where(done, ys, y)
        if r == 2:
            break
        above = torch.where(key > key.gather(1, y[:, None]), w, 0.0).sum(-1)
        kept = above < p * total
        lo = torch.where((done | kept)[:, None], lo, key.gather(1, y[:, None]) + 1)
        done = done | kept
    return ys, done


def main():
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator().manual_seed(0)
    # correctness: the kernels' draws equal the torch procedure's (small rows with ties, bf16 and float32)
    for dtype, V in ((torch.bfloat16, 3000), (torch.float32, 2049)):
        B, K1 = 3, 2
        x = (torch.randn(B, K1, V, generator=g) * 2).round(decimals=1).to(dtype)
        T = torch.tensor([0.8, 1.0, 0.6])
        tp = torch.tensor([0.9, 0.5, 0.95])
        u1, u2 = torch.rand(B * K1, generator=g), torch.rand(B * K1, generator=g)
        y, done = pivot_draws(x.to(dev), T.to(dev), tp.to(dev), u1.to(dev), u2.to(dev))
        y_ref, done_ref = pivot_draws_ref(x, T, tp, u1, u2)
        same = bool((y.cpu().long() == y_ref).all() and (done.cpu().bool() == done_ref).all())
        print(f"{dtype}, V = {V}: kernels' draws equal the torch procedure's: {same} "
              f"(tokens {y.cpu().tolist()}, done {done.cpu().tolist()})")  # fmt: skip
    if dev != "cuda":
        return
    from _timing import per_instance_us

    V, K = 151936, 3
    print(
        "\n| B | logits | today's top-p alone verify (us) | pivot passes, two rounds (us) | rows done after 2 rounds |"
    )
    print("| --- | --- | --- | --- | --- |")
    for scale in (1.0, 4.0):
        for B in (1, 8, 64):
            x = (torch.randn(B, K + 1, V, device=dev) * scale).bfloat16()
            d = torch.argmax(x, -1)[:, :K].contiguous()
            T = torch.full((B,), 0.8, device=dev)
            tk = torch.zeros(B, dtype=torch.int64, device=dev)
            tp = torch.full((B,), 0.9, device=dev)
            seed = torch.arange(B, device=dev, dtype=torch.int64)
            off = torch.zeros(B, device=dev, dtype=torch.int64)
            u1, u2 = torch.rand(B * (K + 1), device=dev), torch.rand(B * (K + 1), device=dev)
            today = per_instance_us(lambda: chain_verify_sampling(x, d, T, tk, tp, seed, off), copies=5)
            pivot = per_instance_us(lambda: pivot_draws(x, T, tp, u1, u2), copies=5)
            _, done = pivot_draws(x, T, tp, u1, u2)
            print(f"| {B} | {scale} * randn | {today:.1f} | {pivot:.1f} | {int(done.sum())} of {done.numel()} |")


if __name__ == "__main__":
    main()
