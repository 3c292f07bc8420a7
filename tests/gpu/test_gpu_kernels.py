"""Kernels on CUDA: bit for bit against their references, and captured in a graph + replayed on new data."""

import pytest
import torch

from stepgraph.copy_in import input_copy
from stepgraph.kernels import _sampling_topk, input_copy_ref
from stepgraph.kernels.chain_sampling import (
    chain_verify_sampling,
    filter_cut_keys,
    filter_cut_keys_ref,
    sampling_probs,
)
from stepgraph.kernels.draft_extend_tail import argmax_rows, draft_extend_tail, draft_extend_tail_ref
from stepgraph.kernels.greedy_verify import greedy_chain_verify, greedy_chain_verify_ref
from stepgraph.kernels.relay import RelayGather, RelayStore, relay_gather_ref, relay_store_ref
from stepgraph.kernels.skinny_matmul import MAX_ROWS, skinny_matmul, skinny_matmul_ref

pytestmark = pytest.mark.gpu
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def adversarial(B, K1, V, dtype):
    x = torch.randn(B, K1, V, device="cuda").to(dtype)
    x[0, 0] = float("-inf")
    if V > 9000:
        x[0, -1] = 0
        x[0, -1, 8191] = 3.0
        x[0, -1, 8192] = 3.0  # tie across a block boundary
    if B > 1:
        x[1, 0, V // 2] = float("nan")
        x[1, 0, V // 3] = float("nan")
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "B,K,V", [(1, 3, 151936), (8, 3, 151936), (64, 3, 32000), (3, 0, 5), (5, 7, 262144), (2, 1, 4097)]
)
def test_greedy_verify_bitwise(B, K, V, dtype):
    x = adversarial(B, K + 1, V, dtype)
    pred = torch.argmax(x, -1)
    d = pred[:, :K].clone()
    if B > 2 and K > 1:
        d[2, 1] += 1
    s = torch.randint(0, 100, (B,), device="cuda", dtype=torch.int32)
    out = {
        k: torch.full(shape, -7, dtype=dt, device="cuda")
        for k, shape, dt in [
            ("predict", (B, K + 1), torch.int64),
            ("num_accepted", (B,), torch.int64),
            ("bonus", (B,), torch.int64),
        ]
    }
    got = greedy_chain_verify(x, d, s, with_accept_len=True, with_select=True, with_emitted=True, out=out)
    ref = greedy_chain_verify_ref(x, d, s)
    for f in got._fields:
        assert torch.equal(getattr(got, f), getattr(ref, f)), f


def test_greedy_verify_strided_logits():
    base = torch.randn(4, 6, 50000, device="cuda", dtype=torch.bfloat16)
    x = base[:, 1:5]  # non-contiguous batch/row strides, unit stride along V
    d = torch.argmax(x, -1)[:, :3].contiguous()
    assert torch.equal(greedy_chain_verify(x, d).predict, torch.argmax(x, -1))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "N,V,D,B", [(4, 151936, 1024, 1), (32, 151936, 1024, 8), (256, 32000, 1024, 64), (7, 1000, 33, 3)]
)
def test_tail_bitwise(N, V, D, B, dtype):
    x = torch.randn(N, V, device="cuda").to(dtype)
    x[0] = float("-inf")
    h = torch.randn(N, D, device="cuda").to(dtype)
    sel = torch.randint(0, N, (B,), device="cuda")
    sel[0] = 0
    got = draft_extend_tail(x, h, sel)
    ref = draft_extend_tail_ref(x, h, sel)
    assert torch.equal(got.tokens, ref.tokens) and torch.equal(got.hidden, ref.hidden)
    assert torch.equal(argmax_rows(x), torch.argmax(x, -1))


def _graph(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    return g, out


def test_greedy_verify_and_tail_replay_on_new_data():
    B, K, V, D = 8, 3, 151936, 1024
    x = torch.empty(B, K + 1, V, device="cuda", dtype=torch.bfloat16)
    d = torch.empty(B, K, device="cuda", dtype=torch.int64)
    h = torch.empty(B * (K + 1), D, device="cuda", dtype=torch.bfloat16)

    def fn():
        r = greedy_chain_verify(x, d, with_select=True)
        t = draft_extend_tail(x.view(-1, V), h, r.select)
        return r, t

    x.copy_(torch.randn_like(x, dtype=torch.float32).bfloat16())
    d.copy_(torch.argmax(x, -1)[:, :K])
    g, (r, t) = _graph(fn)
    for _ in range(3):
        x.copy_(torch.randn_like(x, dtype=torch.float32).bfloat16())
        d.copy_(torch.argmax(x, -1)[:, :K])
        d[::2, 1] += 1
        h.copy_(torch.randn_like(h, dtype=torch.float32).bfloat16())
        g.replay()
        ref = greedy_chain_verify_ref(x, d)
        assert torch.equal(r.predict, ref.predict) and torch.equal(r.num_accepted, ref.num_accepted)
        tref = draft_extend_tail_ref(x.view(-1, V), h, ref.select)
        assert torch.equal(t.tokens, tref.tokens) and torch.equal(t.hidden, tref.hidden)


def _sampling_inputs(B, K, V, T=1.0, k=0, p=1.0, seed0=0):
    dev = "cuda"
    return (
        torch.full((B,), T, device=dev),
        torch.full((B,), k, device=dev, dtype=torch.int64),
        torch.full((B,), p, device=dev),
        torch.arange(B, device=dev, dtype=torch.int64) + seed0,
        torch.zeros(B, device=dev, dtype=torch.int64),
    )


@pytest.mark.parametrize(
    "filtered,k,p,small,pivot", [(False, 0, 1.0, False, False), (True, 3, 1.0, False, False),
                                 (True, 0, 0.7, False, False), (True, 4, 0.8, False, False), (True, 3, 1.0, True, False),
                                 (True, 4, 0.8, True, False), (True, 0, 0.7, False, True)],
)  # fmt: skip
def test_sampling_distribution_matches_target(filtered, k, p, small, pivot):
    """First emitted token ~ q_0 and the chain outcomes ~ the exact target-only law (TV distance); the
    general filtered class, the small top-k class and top-p alone drawn by the pivot."""
    torch.manual_seed(1)
    V, K, B = 6, 2, 200_000
    logits1 = torch.randn(1, K + 1, V, device="cuda") * 1.5
    drafts1 = torch.tensor([[2, 4]], device="cuda")
    logits = logits1.expand(B, K + 1, V).contiguous()
    drafts = drafts1.expand(B, K).contiguous()
    T, tk, tp, seed, off = _sampling_inputs(B, K, V, 1.0, k, p)
    out = chain_verify_sampling(logits, drafts, T, tk, tp, seed, off, filtered=filtered, small_top_k=small, pivot=pivot)
    q = sampling_probs(logits1, T[:1], tk[:1], tp[:1], filtered=filtered)[0].double()  # [K+1, V]
    d = drafts1[0].tolist()
    exact = {}
    acc = 1.0
    for j in range(K + 1):
        for x in range(V):
            if j < K and x == d[j]:
                continue
            exact[(j, x)] = acc * q[j, x].item()
        if j < K:
            acc *= q[j, d[j]].item()
    n = out.num_accepted
    final = out.bonus
    counts = torch.zeros(K + 1, V, device="cuda", dtype=torch.float64)
    counts.index_put_((n, final), torch.ones(B, device="cuda", dtype=torch.float64), accumulate=True)
    emp = (counts / B).cpu()
    tv = 0.5 * sum(abs(emp[j, x].item() - exact.get((j, x), 0.0)) for j in range(K + 1) for x in range(V))
    assert tv < 0.01, (tv, emp, exact)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_filter_cut_equals_reference_at_full_vocabulary(dtype):
    """The kernels' top-k/top-p cut-off equals the reference's on 64 rows of V = 151,936 per dtype:
    settings mixed per request (top-k off, 1, tens, thousands; top-p off, tight, loose), logits with
    ties (rounded), -inf entries and a scale that makes the distribution peaked or flat."""
    torch.manual_seed(3)
    B, K1, V = 16, 4, 151936
    scale = torch.tensor([0.5, 2.0, 8.0, 1.0] * 4, device="cuda").view(B, 1, 1)
    x = torch.randn(B, K1, V, device="cuda") * scale
    x[::3] = torch.round(x[::3] * 4) / 4  # many ties
    x[1, 2, :1000] = float("-inf")
    x = x.to(dtype)
    T = torch.rand(B, device="cuda") + 0.2
    k = torch.tensor([0, 1, 50, 2000] * 4, device="cuda")
    p = torch.tensor([1.0, 0.9, 0.5, 0.95, 0.3, 1.0, 0.99, 0.8] * 2, device="cuda")
    assert torch.equal(filter_cut_keys(x, T, k, p), filter_cut_keys_ref(x, T, k, p))


@pytest.mark.parametrize("gather_cap", [_sampling_topk.GATHER_CAP, 256])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_small_top_k_cut_equals_reference_at_full_vocabulary(dtype, gather_cap, monkeypatch):
    """The small top-k class's cut equals the reference's on 64 rows of V = 151,936 per dtype: top-k 1 to
    256 with top-p off, tight and loose, ties (rounded logits), rows whose thousands of ties at the k-th
    value overflow the gather cap (the row's own radix select), -inf entries, a row with fewer finite
    entries than its top-k, peaked and flat rows; a gather cap of 256 sends more rows to the radix."""
    monkeypatch.setattr(_sampling_topk, "GATHER_CAP", gather_cap)
    torch.manual_seed(8)
    B, K1, V = 16, 4, 151936
    scale = torch.tensor([0.5, 2.0, 8.0, 1.0] * 4, device="cuda").view(B, 1, 1)
    x = torch.randn(B, K1, V, device="cuda") * scale
    x[::3] = torch.round(x[::3] * 4) / 4
    x[2, :, 5000:9000] = 3.0  # thousands of ties at the k-th value
    x[1, 2, :1000] = float("-inf")
    x[5, 1, 30:] = float("-inf")  # 30 finite entries, top_k 50
    x = x.to(dtype)
    T = torch.rand(B, device="cuda") + 0.2
    k = torch.tensor([1, 50, 256, 20] * 4, device="cuda")
    p = torch.tensor([1.0, 0.9, 0.5, 0.95, 0.3, 1.0, 0.99, 0.8] * 2, device="cuda")
    assert torch.equal(filter_cut_keys(x, T, k, p, small_top_k=True), filter_cut_keys_ref(x, T, k, p))


def test_small_top_k_class_draws_what_the_filtered_class_draws():
    """Same seeds, same tokens at full vocabulary: both classes end in the same launch."""
    torch.manual_seed(9)
    B, K, V = 16, 3, 151936
    logits = (torch.randn(B, K + 1, V, device="cuda") * 2).bfloat16()
    logits[3, :, 1000:2000] = 7.0
    drafts = torch.topk(logits[:, :K].float(), 2, -1).indices[..., 1].contiguous()
    T, tk, tp, seed, _ = _sampling_inputs(B, K, V, 0.8, 50, 0.9)
    tk[::4], tp[::4], T[1::4] = 0, 1.0, 0.0  # temperature-only and greedy rows
    mp = torch.full((B,), 0.02, device="cuda")
    mp[::4] = 0.0
    runs = []
    for small in (False, True):
        off = torch.zeros(B, device="cuda", dtype=torch.int64)
        runs.append(torch.stack([
            chain_verify_sampling(logits, drafts, T, tk, tp, seed, off, min_p=mp, small_top_k=small).tokens
            for _ in range(8)
        ]))  # fmt: skip
    assert torch.equal(runs[0], runs[1])


@pytest.mark.parametrize("min_p", [0.05, 0.3])
def test_min_p_distribution_matches_target(min_p):
    torch.manual_seed(4)
    V, K, B = 8, 1, 200_000
    logits1 = torch.randn(1, K + 1, V, device="cuda") * 1.5
    T, tk, tp, seed, off = _sampling_inputs(B, K, V, 1.0, 0, 1.0)
    mp = torch.full((B,), min_p, device="cuda")
    out = chain_verify_sampling(
        logits1.expand(B, -1, -1).contiguous(), torch.full((B, K), 3, device="cuda"), T, tk, tp, seed, off, min_p=mp
    )
    q = sampling_probs(logits1, T[:1], tk[:1], tp[:1], min_p=mp[:1])[0].double()
    assert (q[0] == 0).any() or min_p < 0.1  # the filter removes something at 0.3
    law = torch.zeros(K + 1, V, dtype=torch.float64)
    law[0] = q[0]
    law[0, 3] = 0.0
    law[1] = q[0, 3] * q[1]
    counts = torch.zeros(K + 1, V, device="cuda", dtype=torch.float64)
    counts.index_put_((out.num_accepted, out.bonus), torch.ones(B, device="cuda", dtype=torch.float64), accumulate=True)
    assert 0.5 * (counts.cpu() / B - law).abs().sum().item() < 0.01


@pytest.mark.parametrize(
    "mode,top_k", [({"small_top_k": False}, 50), ({"small_top_k": True}, 50), ({"pivot": True}, 0)], ids=str
)
def test_sampling_graph_replay_draws_fresh_and_seeds_reproduce(mode, top_k):
    B, K, V = 64, 3, 32000
    logits = torch.randn(B, K + 1, V, device="cuda", dtype=torch.bfloat16)
    drafts = torch.argmax(logits, -1)[:, :K].contiguous()
    T, tk, tp, seed, off = _sampling_inputs(B, K, V, 1.5, top_k, 0.95)
    g, out = _graph(lambda: chain_verify_sampling(logits, drafts, T, tk, tp, seed, off, **mode))
    seen = []
    for _ in range(3):
        g.replay()
        seen.append(out.tokens.clone())
    assert not torch.equal(seen[0], seen[1]) and not torch.equal(seen[1], seen[2])
    off.zero_()
    a = chain_verify_sampling(logits, drafts, T, tk, tp, seed, off.clone(), **mode).tokens
    b = chain_verify_sampling(logits, drafts, T, tk, tp, seed, off.clone(), **mode).tokens
    assert torch.equal(a, b)


def test_sampling_greedy_rows_equal_greedy_verify():
    B, K, V = 16, 3, 151936
    logits = adversarial(B, K + 1, V, torch.bfloat16)
    drafts = torch.argmax(logits, -1)[:, :K].clone()
    drafts[::3, 0] += 1
    T, tk, tp, seed, off = _sampling_inputs(B, K, V, 0.0, 0, 1.0)
    for filtered, small in ((False, False), (True, False), (True, True)):
        s = chain_verify_sampling(logits, drafts, T, tk, tp, seed, off, filtered=filtered, small_top_k=small)
        g = greedy_chain_verify_ref(logits, drafts)
        assert torch.equal(s.num_accepted, g.num_accepted) and torch.equal(s.bonus, g.bonus)


def test_copy_and_relay_on_cuda_bitwise_and_replay():
    srcs = [
        torch.randn(5, k, device="cuda").to(dt)
        for k, dt in zip(
            range(1, 10),
            [
                torch.float32,
                torch.bfloat16,
                torch.int64,
                torch.int32,
                torch.float16,
                torch.uint8,
                torch.int16,
                torch.bool,
                torch.float64,
            ],
        )
    ]
    srcs[7] = srcs[7] > 0 if srcs[7].dtype == torch.bool else srcs[7]
    dsts = [torch.zeros(8, *s.shape[1:], dtype=s.dtype, device="cuda") for s in srcs]
    ref = [d.clone() for d in dsts]
    pads = [1, 2.0, -1, 3, 0.5, 9, -4, True, 7.0]
    input_copy(srcs, dsts, 5, 7, pads)
    input_copy_ref(srcs, ref, 5, 7, pads)
    assert all(torch.equal(a, b) for a, b in zip(dsts, ref))
    host = [s.cpu() for s in srcs]
    dsts2 = [torch.zeros_like(d) for d in dsts]
    input_copy(host, dsts2, 5, 7, pads)  # staged through one pinned buffer
    assert all(torch.equal(a, b) for a, b in zip(dsts2, ref))
    S, Bm = 10, 8
    fields = [
        torch.randn(S, 1024, device="cuda").bfloat16(),
        torch.arange(S, device="cuda"),
        torch.randn(S, device="cuda"),
    ]
    src = [
        torch.randn(Bm, 1024, device="cuda").bfloat16(),
        torch.arange(Bm, device="cuda") + 100,
        torch.randn(Bm, device="cuda"),
    ]
    slots = torch.tensor([3, -1, 0, 9, 5], device="cuda")
    f1, f2 = [f.clone() for f in fields], [f.clone() for f in fields]
    store = RelayStore(f1, src)
    g, _ = _graph(lambda: store(slots))
    for t in src:
        t.copy_(torch.randn_like(t, dtype=torch.float32).to(t.dtype) if t.dtype.is_floating_point else t + 1)
    g.replay()
    relay_store_ref(f2, src, slots)
    assert all(torch.equal(a, b) for a, b in zip(f1, f2))
    outs = [torch.zeros_like(t) for t in src]
    outs2 = [torch.zeros_like(t) for t in src]
    RelayGather(fields, outs, [0, -1, 0.0])(slots)
    relay_gather_ref(fields, outs2, slots, [0, -1, 0.0])
    assert all(torch.equal(a[:5], b[:5]) for a, b in zip(outs, outs2))


def test_skinny_matmul_replay_is_bitwise_and_rows_do_not_depend_on_the_batch():
    """The example model's down projection shape (split reduction), bf16: graph replay equals eager, and a
    row's bits are the same alone, in 4 and 16 rows (a padded block of 16) as in 64 rows (a block of 64)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(MAX_ROWS, 3072, device="cuda", generator=g).bfloat16()
    w = (torch.randn(3072, 1024, device="cuda", generator=g) / 55).bfloat16()
    r = torch.randn(MAX_ROWS, 1024, device="cuda", generator=g).bfloat16()
    full = skinny_matmul(x, w, r)
    torch.testing.assert_close(full.float(), skinny_matmul_ref(x, w, r).float(), atol=2e-2, rtol=1e-2)
    for m in (1, 4, 16):
        assert torch.equal(skinny_matmul(x[:m], w, r[:m]), full[:m]), m
    xs, rs = x[:4].clone(), r[:4].clone()
    graph, out = _graph(lambda: skinny_matmul(xs, w, rs))
    xs.copy_(x[4:8])
    rs.copy_(r[4:8])
    graph.replay()
    assert torch.equal(out, full[4:8])


@pytest.mark.parametrize("name", ["temperature", "top_k", "top_p", "general"])
@pytest.mark.parametrize("B", [1, 8])
def test_dependent_launches_draw_plain_orders_tokens_replayed_on_new_data(name, B):
    """The sampled verify's launches as programmatic dependents (the default on sm_90 and up) give the
    tokens of plain stream order, eagerly and replayed from a graph on new logits, drafts and settings each
    time: a launch that read what the one before writes before that one ended would differ."""
    from stepgraph.kernels._common import dependent_launch
    from stepgraph.sampling import sampling_class

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90")
    K, V = 3, 151936
    x = torch.empty(B, K + 1, V, device="cuda", dtype=torch.bfloat16)
    assert dependent_launch(x)["launch_pdl"] and not dependent_launch(x, False)["launch_pdl"]
    d = torch.empty(B, K, device="cuda", dtype=torch.int64)
    T, k, p, seed, off = _sampling_inputs(B, K, V, T=0.8, p=0.9)
    mode = sampling_class(name).kernel

    def draw(dependent):
        return chain_verify_sampling(x, d, T, k, p, seed, off, **mode, dependent=dependent)

    def new_data(i):
        torch.manual_seed(i)
        x.copy_((torch.randn(x.shape, device="cuda") * (1 + 3 * (i % 2))).bfloat16())
        d.copy_(torch.argmax(x[:, :K].float(), -1))
        d[::2, 0] = torch.randint(0, V, (d[::2].shape[0],), device="cuda")
        k.copy_(torch.randint(1, 300, (B,)) if name == "top_k" else torch.randint(1100, 3000, (B,)))
        if name not in ("top_k", "general"):
            k.zero_()
        seed.copy_(torch.randint(0, 2**62, (B,)))

    new_data(0)
    g, out = _graph(lambda: draw(True))
    for i in range(1, 5):
        new_data(i)
        off.zero_()
        g.replay()
        off.zero_()
        plain = draw(False)
        off.zero_()
        eager = draw(True)
        assert torch.equal(out.tokens, plain.tokens) and torch.equal(out.num_accepted, plain.num_accepted), i
        assert torch.equal(eager.tokens, plain.tokens), i
