"""chain_verify_sampling: exact rule checks, the emitted distribution, seeds, offsets, greedy rows."""

import pytest
import torch
import triton
import triton.language as tl

from stepgraph.kernels import _sampling_topk
from stepgraph.kernels._sampling_filter import BLOCK, SPLIT_BLOCKS, add_counts, bucket_log2, bucket_totals, no_counts
from stepgraph.kernels.chain_sampling import (
    chain_verify_sampling,
    chain_verify_sampling_ref,
    filter_cut_keys,
    filter_cut_keys_ref,
    sampling_probs,
)
from stepgraph.kernels.greedy_verify import greedy_chain_verify_ref
from stepgraph.sampling import CLASSES
from tests.conftest import HAS_CUDA

DEV = "cuda" if HAS_CUDA else "cpu"


def params(B, T=1.0, k=0, p=1.0, seed0=0):
    return (
        torch.full((B,), T, device=DEV),
        torch.full((B,), k, device=DEV, dtype=torch.int64),
        torch.full((B,), p, device=DEV),
        torch.arange(B, device=DEV, dtype=torch.int64) + seed0,
        torch.zeros(B, device=DEV, dtype=torch.int64),
    )


def exact_law(q, drafts):
    """P(n accepted, final token x) for target-only chain verification with distributions q [K+1, V]."""
    K1, V = q.shape
    law, acc = {}, 1.0
    for j in range(K1):
        for x in range(V):
            if j < K1 - 1 and x == drafts[j]:
                continue
            law[(j, x)] = acc * q[j, x].item()
        if j < K1 - 1:
            acc *= q[j, drafts[j]].item()
    return law


def tv_distance(out, law, B):
    counts = {}
    for n, x in zip(out.num_accepted.tolist(), out.bonus.tolist()):
        counts[(n, x)] = counts.get((n, x), 0) + 1
    keys = set(law) | set(counts)
    return 0.5 * sum(abs(counts.get(k, 0) / B - law.get(k, 0.0)) for k in keys)


@pytest.mark.parametrize("filtered", [False, True])
def test_one_hot_distributions_are_deterministic(filtered):
    B, K, V = 3, 3, 40
    logits = torch.full((B, K + 1, V), -1e4, device=DEV)
    targets = torch.randint(0, V, (B, K + 1), device=DEV)
    logits.scatter_(2, targets[..., None], 0.0)  # one-hot after softmax
    drafts = targets[:, :K].clone()
    drafts[1, 1] = (drafts[1, 1] + 1) % V
    out = chain_verify_sampling(
        logits, drafts, *params(B, 1.0, 5 if filtered else 0, 0.9 if filtered else 1.0), filtered=filtered
    )
    assert out.num_accepted.tolist() == [3, 1, 3]
    assert out.tokens[1].tolist() == [targets[1, 0].item(), targets[1, 1].item(), -1, -1]
    assert out.bonus[0].item() == targets[0, 3].item()


@pytest.mark.slow
@pytest.mark.parametrize("filtered,k,p", [(False, 0, 1.0), (True, 3, 1.0), (True, 0, 0.7)])
def test_kernel_emits_the_target_distribution(filtered, k, p):
    """TV distance between the kernel's (n, token) outcomes and the exact law. With N draws and M outcomes
    the expected distance is about sqrt(M / (2 pi N)); the bound is 3x that. Triton's interpreter runs
    Philox per element in Python, so on CPU this is a smoke check with few draws; the GPU test
    (tests/gpu) draws 200,000 and bounds the distance at 0.01."""
    torch.manual_seed(1)
    V, K = 5, 1
    B = 4000 if HAS_CUDA else (100 if filtered else 200)
    # bfloat16: 16-bit keys, so the filtered class takes 8 cut-off rounds (float32: 16) in the interpreter
    logits1 = (torch.randn(1, K + 1, V, device=DEV) * 1.5).bfloat16()
    drafts1 = torch.tensor([[2]], device=DEV)
    T, tk, tp, seed, off = params(B, 1.0, k, p)
    out = chain_verify_sampling(
        logits1.expand(B, -1, -1).contiguous(),
        drafts1.expand(B, -1).contiguous(),
        T,
        tk,
        tp,
        seed,
        off,
        filtered=filtered,
    )
    q = sampling_probs(logits1, T[:1], tk[:1], tp[:1], filtered=filtered)[0].double()
    law = exact_law(q, drafts1[0].tolist())
    bound = 3 * (len(law) / (2 * 3.1416 * B)) ** 0.5  # 0.03 on the GPU, 0.2 / 0.28 on CPU
    assert tv_distance(out, law, B) < bound


@pytest.mark.parametrize("filtered,k,p", [(False, 0, 1.0), (True, 3, 1.0), (True, 0, 0.7), (True, 2, 0.8)])
def test_torch_reference_emits_the_target_distribution(filtered, k, p):
    torch.manual_seed(2)
    V, K, B = 6, 2, 100_000
    logits1 = torch.randn(1, K + 1, V) * 1.5
    drafts1 = torch.tensor([[2, 4]])
    T, tk, tp, seed, off = (t.cpu() for t in params(B, 0.9, k, p))
    out = chain_verify_sampling_ref(
        logits1.expand(B, -1, -1), drafts1.expand(B, -1), T, tk, tp, seed, off, filtered=filtered
    )
    q = sampling_probs(logits1, T[:1], tk[:1], tp[:1], filtered=filtered)[0].double()
    assert tv_distance(out, exact_law(q, [2, 4]), B) < 0.01


def test_filters_keep_the_documented_sets():
    logits = torch.tensor([[[3.0, 1.0, 2.0, 2.0, 0.0]]])
    one = torch.ones(1)
    q = sampling_probs(logits, one, torch.tensor([2]), one, filtered=True)[0, 0]
    assert (q > 0).tolist() == [True, False, True, True, False]  # top-2 keeps the tie at the 2nd value
    q = sampling_probs(logits, one, torch.tensor([0]), torch.tensor([0.5]), filtered=True)[0, 0]
    assert (q > 0).tolist() == [True, False, False, False, False]  # mass of strictly larger < 0.5 only for 3.0
    q = sampling_probs(logits, one, torch.tensor([0]), one, filtered=True, min_p=torch.tensor([0.3]))[0, 0]
    assert (q > 0).tolist() == [True, False, True, True, False]  # e^-1 >= 0.3 > e^-2
    q = sampling_probs(logits, one, torch.tensor([5]), one, filtered=True, min_p=torch.tensor([0.0]))[0, 0]
    assert (q > 0).all()  # top_k = V, top_p = 1 and min_p = 0 are all off


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_filter_cut_equals_reference(dtype):
    """The kernels' cut-off equals the reference's, row by row, with settings mixed per request, ties
    (rounded logits; +0.0 and -0.0 are one key), -inf entries, peaked and flat rows. Full vocabulary on the
    GPU: tests/gpu."""
    torch.manual_seed(5)
    B, K1, V = 8, 2, 401
    x = torch.randn(B, K1, V, device=DEV) * torch.tensor([0.3, 1.0, 4.0, 1.0] * 2, device=DEV).view(B, 1, 1)
    x[::2] = torch.round(x[::2] * 2) / 2
    x[1, 1, :150] = float("-inf")
    x[6] = torch.cat([torch.full((8,), 1.0), torch.zeros(100), -torch.zeros(100), -torch.rand(V - 208) - 0.5])
    x = x.to(dtype)
    T = torch.rand(B, device=DEV) + 0.2
    k = torch.tensor([0, 1, 3, 40, 400, 0, 150, 300], device=DEV)  # row 6 keeps 8 entries and 142 zeros
    p = torch.tensor([0.9, 1.0, 0.5, 0.95, 0.2, 0.99, 1.0, 0.7], device=DEV)
    assert torch.equal(filter_cut_keys(x, T, k, p), filter_cut_keys_ref(x, T, k, p))


def test_seeded_runs_reproduce_and_offsets_advance():
    B, K, V = 2, 2, 60
    logits = torch.randn(B, K + 1, V, device=DEV)
    drafts = torch.argmax(logits, -1)[:, :K].contiguous()
    T, tk, tp, seed, off = params(B, 1.3, 20, 0.95)
    a = chain_verify_sampling(logits, drafts, T, tk, tp, seed, off.clone(), filtered=True).tokens
    b = chain_verify_sampling(logits, drafts, T, tk, tp, seed, off.clone(), filtered=True).tokens
    assert torch.equal(a, b)
    chain_verify_sampling(logits, drafts, T, tk, tp, seed, off, filtered=True)
    assert off.tolist() == [1, 1]
    draws = {
        tuple(chain_verify_sampling(logits, drafts, T, tk, tp, seed, off, filtered=False).tokens.flatten().tolist())
        for _ in range(2)
    }
    assert len(draws) == 2  # each call (each graph replay) advances the offset: fresh numbers


@pytest.mark.parametrize("filtered", [False, True])
def test_greedy_and_degenerate_rows_give_greedy_results(filtered):
    B, K, V = 6, 3, 500
    logits = torch.randn(B, K + 1, V, device=DEV)
    logits[3, 1, 7] = float("nan")  # degenerate row -> greedy rule (first NaN)
    logits[4, 0] = float("-inf")
    logits[5, 2, 9] = float("inf")
    drafts = torch.argmax(logits, -1)[:, :K].clone()
    drafts[0, 0] += 1
    T, tk, tp, seed, off = params(B, 0.0)
    T[3:] = 1.0  # rows 3.. sample, but their degenerate rows fall back to greedy
    out = chain_verify_sampling(logits, drafts, T, tk, tp, seed, off, filtered=filtered)
    ref = greedy_chain_verify_ref(logits, drafts)
    assert torch.equal(out.num_accepted[:3], ref.num_accepted[:3]) and torch.equal(out.bonus[:3], ref.bonus[:3])
    assert out.tokens[3, 1].item() in (7, -1) or out.num_accepted[3].item() == 0


def test_bad_inputs():
    B, K, V = 2, 2, 10
    logits = torch.randn(B, K + 1, V, device=DEV)
    d = torch.zeros(B, K, dtype=torch.long, device=DEV)
    T, tk, tp, seed, off = params(B)
    with pytest.raises(ValueError, match="temperature"):
        chain_verify_sampling(logits, d, T.double(), tk, tp, seed, off)
    with pytest.raises(ValueError, match="seed"):
        chain_verify_sampling(logits, d, T, tk, tp, seed[:1], off)
    with pytest.raises(ValueError, match="draft_tokens"):
        chain_verify_sampling(logits, d[:, :1], T, tk, tp, seed, off)


@pytest.mark.parametrize(
    "dtype,gather_cap",
    [(torch.float32, _sampling_topk.GATHER_CAP), (torch.bfloat16, _sampling_topk.GATHER_CAP), (torch.bfloat16, 256)],
)
def test_small_top_k_cut_equals_reference(dtype, gather_cap, monkeypatch):
    """The small top-k class (a bound from subset maxima, the entries above it listed): the cut of every
    row with 1 <= top_k <= 256 equals the reference's, with hundreds of ties at the k-th value, top_k >= V,
    rounded (tied) logits and -inf entries (more than k of them: the k-th key is -inf); with a gather cap
    of 256 most rows overflow it and take the row's own radix select, ties past the cap counted, not
    listed."""
    monkeypatch.setattr(_sampling_topk, "GATHER_CAP", gather_cap)
    torch.manual_seed(6)
    B, K1, V = 6, 2, 900
    x = torch.randn(B, K1, V, device=DEV) * torch.tensor([0.3, 1.0, 4.0] * 2, device=DEV).view(B, 1, 1)
    x[::2] = torch.round(x[::2] * 2) / 2
    x[0, 0, 100:700] = 2.0  # 600 ties at the k-th value
    x[1, 1, :300] = float("-inf")
    x[3, 0, 5:] = float("-inf")  # 5 finite entries, top_k 7
    x = x.to(dtype)
    T = torch.rand(B, device=DEV) + 0.2
    k = torch.tensor([50, 1, 256, 7, 200, 256], device=DEV)
    p = torch.tensor([0.9, 1.0, 0.5, 0.95, 0.2, 1.0], device=DEV)
    got = filter_cut_keys(x, T, k, p, small_top_k=True)
    assert torch.equal(got, filter_cut_keys_ref(x, T, k, p))
    small = torch.randn(2, 1, 40, device=DEV).to(dtype)  # top_k >= V: every entry is a candidate
    one = torch.ones(2, device=DEV)
    k, p = torch.tensor([256, 40], device=DEV), torch.tensor([0.8, 1.0], device=DEV)
    assert torch.equal(filter_cut_keys(small, one, k, p, small_top_k=True), filter_cut_keys_ref(small, one, k, p))


def test_small_top_k_class_samples_like_the_filtered_class():
    """Same seeds, same tokens: the small top-k class and the general filtered class share the last
    launch, so equal cuts and split masses give equal draws. Rows mix greedy, temperature only, top-k with
    top-p and min-p, a draft inside the kept set, and ties past the candidate list's capacity."""
    torch.manual_seed(7)
    B, K, V = 6, 3, 600
    logits = (torch.randn(B, K + 1, V, device=DEV) * 2).bfloat16()
    logits[4, :, 200:500] = 6.0  # hundreds of ties at the top-k cut (the max is above them)
    drafts = torch.topk(logits[:, :K].float(), 3, -1).indices[..., 1].contiguous()  # kept, not the argmax
    drafts[4] = 300  # an unlisted tie
    T = torch.tensor([0.0, 0.9, 0.7, 1.2, 1.0, 0.8], device=DEV)
    k = torch.tensor([0, 0, 5, 40, 10, 256], device=DEV)
    p = torch.tensor([1.0, 1.0, 0.9, 1.0, 0.95, 0.6], device=DEV)
    mp = torch.tensor([0.0, 0.0, 0.0, 0.2, 0.0, 0.05], device=DEV)
    seed = torch.arange(B, device=DEV) + 11
    outs = []
    for small in (False, True):
        off = torch.zeros(B, dtype=torch.int64, device=DEV)
        draws = []
        for _ in range(2):
            r = chain_verify_sampling(logits, drafts, T, k, p, seed, off, min_p=mp, filtered=True, small_top_k=small)
            draws.append(r.tokens)
        outs.append(torch.stack(draws))
    assert torch.equal(outs[0], outs[1])
    assert not torch.equal(outs[1][0], outs[1][1])  # the offsets advanced between the two calls


@pytest.mark.parametrize(
    "gather_cap,top_k",
    [(_sampling_topk.GATHER_CAP, [_sampling_topk.TOP_K_MAX, 700, 1000, 30]), (256, [256, 250, 240, 30])],
    ids=["lists", "radix"],
)
def test_small_top_k_up_to_its_largest_across_splits(gather_cap, top_k, monkeypatch):
    """Top-k up to TOP_K_MAX over three vocabulary splits: rows listing hundreds of entries (the wide
    search), a few tens (the narrow one), and ties at the k-th value. With a gather cap of 256 the rows
    listing more take the row's own radix select instead. The cuts equal the reference's, and the small
    top-k class draws the top_k_top_p class's tokens, so each split's kept mass is its own."""
    monkeypatch.setattr(_sampling_topk, "GATHER_CAP", gather_cap)
    torch.manual_seed(8)
    B, K, V = 4, 1, 2600
    assert _sampling_topk.TOP_K_MAX >= 1000
    logits = (torch.randn(B, K + 1, V, device=DEV) * 1.5).bfloat16()
    logits[2, :, 900:1400] = 1.0  # ties at the k-th value, in two splits
    drafts = torch.argmax(logits[:, :K].float(), -1)
    T = torch.tensor([1.0, 0.8, 1.2, 0.7], device=DEV)
    k = torch.tensor(top_k, device=DEV)
    p = torch.tensor([1.0, 0.95, 0.9, 0.8], device=DEV)
    mp = torch.tensor([0.0, 0.0, 0.01, 0.0], device=DEV)
    assert torch.equal(filter_cut_keys(logits, T, k, p, small_top_k=True), filter_cut_keys_ref(logits, T, k, p))
    seed = torch.arange(B, device=DEV) + 3
    tokens = []
    for small in (False, True):
        off = torch.zeros(B, dtype=torch.int64, device=DEV)
        r = chain_verify_sampling(logits, drafts, T, k, p, seed, off, min_p=mp, filtered=True, small_top_k=small)
        tokens.append(r.tokens)
    assert torch.equal(tokens[0], tokens[1])


@pytest.mark.parametrize("mode", [{"small_top_k": True}, {"pivot": True}], ids=["top_k", "top_p"])
def test_small_top_k_rows_draw_their_sample_from_their_lists(mode, monkeypatch):
    """The cut launch draws each small top-k row's sample from its list, by the number the last launch
    would draw it with; a row whose kept ties at the cut overflow the list (300 ties, a gather cap of 256)
    is left to the last launch's scan of its split. Either way the tokens are the reference's, offset after
    offset (fresh numbers), in the top_k class and among the top_p class's own launches."""
    from stepgraph.kernels._sampling_topk import UNLISTED, topk_mass
    from stepgraph.kernels.chain_sampling import split_layout

    monkeypatch.setattr(_sampling_topk, "GATHER_CAP", 256)
    torch.manual_seed(11)
    B, K, V = 4, 2, 1500
    logits = (torch.randn(B, K + 1, V, device=DEV) * 2).bfloat16()
    logits[3, :, 400:700] = 9.0  # 300 ties at the top: top-k 10 keeps every one
    drafts = torch.randint(0, V, (B, K), device=DEV)
    drafts[1] = torch.argmax(logits[1, :K].float(), -1)  # likely accepted: the bonus row samples
    T = torch.tensor([1.0, 0.8, 1.2, 0.7], device=DEV)
    k = torch.tensor([20, 40, 5, 10], device=DEV)
    p = torch.tensor([0.9, 1.0, 0.8, 1.0], device=DEV)
    mp = torch.tensor([0.0, 0.05, 0.0, 0.0], device=DEV)
    seed = torch.arange(B, device=DEV) + 5
    rows = B * (K + 1)
    layout = split_layout(rows, V)
    parts = [torch.empty((rows, layout[0]), dtype=torch.float32, device=DEV) for _ in range(2)]
    keys = [torch.empty((rows, layout[0]), dtype=torch.int32, device=DEV) for _ in range(2)]
    pick = torch.empty(rows, dtype=torch.int64, device=DEV)
    off = torch.zeros(B, dtype=torch.int64, device=DEV)
    topk_mass(logits, drafts, T, k, p, mp, layout, *parts, *keys, sample=(seed, off, pick))
    assert (pick.view(B, K + 1)[:3] >= 0).all() and (pick.view(B, K + 1)[3] == UNLISTED.value).all(), pick
    for step in range(4):
        off = torch.full((B,), step, dtype=torch.int64, device=DEV)
        got = chain_verify_sampling(logits, drafts, T, k, p, seed, off.clone(), min_p=mp, filtered=True, **mode)
        ref = chain_verify_sampling_ref(logits, drafts, T, k, p, seed, off.clone(), min_p=mp, filtered=True, **mode)
        assert torch.equal(got.tokens, ref.tokens), (step, got.tokens, ref.tokens)


@pytest.mark.slow
def test_small_top_k_class_emits_the_target_distribution():
    torch.manual_seed(1)
    k, p = 2, 0.8
    V, K = 5, 1
    B = 4000 if HAS_CUDA else 100
    logits1 = (torch.randn(1, K + 1, V, device=DEV) * 1.5).bfloat16()
    drafts1 = torch.tensor([[2]], device=DEV)
    T, tk, tp, seed, off = params(B, 1.0, k, p)
    out = chain_verify_sampling(
        logits1.expand(B, -1, -1).contiguous(), drafts1.expand(B, -1).contiguous(), T, tk, tp, seed, off,
        filtered=True, small_top_k=True,
    )  # fmt: skip
    q = sampling_probs(logits1, T[:1], tk[:1], tp[:1], filtered=True)[0].double()
    law = exact_law(q, drafts1[0].tolist())
    assert tv_distance(out, law, B) < 3 * (len(law) / (2 * 3.1416 * B)) ** 0.5


KERNEL_MODES = {c.name: c.kernel for c in CLASSES if c.kernel is not None}  # each sampled class's kernel options


@pytest.mark.parametrize(
    "name,dtype",
    [("temperature", torch.float32), ("temperature", torch.bfloat16), ("top_k", torch.float32),
     ("top_k", torch.bfloat16), ("top_k_top_p", torch.bfloat16),  # float32 cut-offs: 16 rounds, slow here
     ("top_p", torch.bfloat16)],
    ids=str,
)  # fmt: skip
def test_the_kernel_draws_the_references_tokens(name, dtype):
    """The kernels and their torch reference draw the same Philox numbers and sample by the same rule, so
    every row's tokens agree: the reference's distribution tests (100,000 draws, above) then hold for the
    kernels too. Rows mix greedy and sampled ones, every filter, drafts kept and not."""
    torch.manual_seed(5)
    mode = KERNEL_MODES[name]
    B, K, V = (8, 3, 53) if HAS_CUDA or name == "temperature" else (6, 2, 41)
    logits = (torch.randn(B, K + 1, V, device=DEV) * 2).to(dtype)
    drafts = torch.randint(0, V, (B, K), device=DEV)
    drafts[::2] = torch.argmax(logits[::2, :K].float(), -1)  # likely accepted
    T = torch.rand(B, device=DEV) * 1.5
    T[::5] = 0.0
    small = mode.get("small_top_k", False)
    k = torch.randint(1, 20, (B,), device=DEV) if small else torch.randint(0, 40, (B,), device=DEV)
    p = torch.where(torch.rand(B, device=DEV) < 0.5, torch.rand(B, device=DEV) * 0.5 + 0.5, torch.ones(B, device=DEV))
    mp = torch.where(torch.rand(B, device=DEV) < 0.3, torch.rand(B, device=DEV) * 0.2, torch.zeros(B, device=DEV))
    seed = torch.randint(-(2**62), 2**62, (B,), device=DEV)
    for step in range(3 if name == "temperature" else 1):  # the offsets advance: fresh numbers, the same on both
        off = torch.full((B,), step, dtype=torch.int64, device=DEV)
        got = chain_verify_sampling(logits, drafts, T, k, p, seed, off.clone(), min_p=mp, **mode)
        ref = chain_verify_sampling_ref(logits, drafts, T, k, p, seed, off.clone(), min_p=mp, **mode)
        assert torch.equal(got.tokens, ref.tokens), (step, (got.tokens != ref.tokens).any(-1).nonzero().flatten())


@pytest.mark.parametrize("name,top_k", [("temperature", 0), ("top_k", 1000)])
def test_the_sample_is_found_in_its_block_of_the_split(name, top_k, monkeypatch):
    """Splits of five blocks (the last split shorter): the last launch sums the kept mass of each block of
    the sample's split, four blocks a step (leaving out those past the split), picks the block that holds
    the sample and scans it. The tokens are the reference's, and they fall in many blocks."""
    from stepgraph.kernels import chain_sampling

    split = 5 * BLOCK
    monkeypatch.setattr(chain_sampling, "split_layout", lambda rows, V: (-(-V // split), split))
    g = torch.Generator().manual_seed(7)
    B, K, V = 12, 1, 2 * split + 700
    logits = (torch.randn(B, K + 1, V, generator=g) * 0.5).bfloat16().to(DEV)  # flat rows: samples anywhere
    drafts = torch.randint(0, V, (B, K), generator=g).to(DEV)  # rejected: each request samples a correction
    T, k, p, seed, off = params(B, 1.0, top_k)
    mode = KERNEL_MODES[name]
    got = chain_verify_sampling(logits, drafts, T, k, p, seed, off.clone(), **mode)
    ref = chain_verify_sampling_ref(logits, drafts, T, k, p, seed, off.clone(), **mode)
    assert torch.equal(got.tokens, ref.tokens)
    blocks = (got.bonus // BLOCK).tolist()
    assert len(set(blocks)) >= 5 and any(b % 5 == 4 for b in blocks), blocks  # a split's last block too


@pytest.mark.parametrize("vocab", [1, 1000, 1500, 32_000, 151_936, 262_144, 520_000, 4_000_000])
def test_the_split_layout_keeps_what_the_kernels_rely_on(vocab):
    """Every entry in one split and no split empty; a split a whole number of blocks, at most
    ``SPLIT_BLOCKS`` of them (the count rounds' bytes a lane and 16-bit sums a split); at least eight splits a
    row where the vocabulary has the blocks for them, at most 32 unless those blocks need more; and above those
    floors, no more programs than the layout aims at: one wave."""
    from stepgraph.kernels.chain_sampling import MAX_SPLITS, PROGRAMS, split_layout

    assert SPLIT_BLOCKS * BLOCK < 2**16 and SPLIT_BLOCKS < 2**8
    blocks = -(-vocab // BLOCK)
    for rows in [*range(1, 70), 128, 132, 256, 1024]:
        n_splits, split = split_layout(rows, vocab)
        assert split % BLOCK == 0 and split // BLOCK <= SPLIT_BLOCKS, (rows, split)
        assert (n_splits - 1) * split < vocab <= n_splits * split, (rows, n_splits, split)
        assert n_splits >= min(8, blocks), (rows, n_splits)
        assert n_splits <= max(MAX_SPLITS, -(-blocks // SPLIT_BLOCKS)), (rows, n_splits)
        if n_splits > max(8, -(-blocks // SPLIT_BLOCKS)):  # above its floors: one wave of programs
            assert rows * n_splits <= PROGRAMS, (rows, n_splits)


@triton.jit
def _count_kernel(bucket_ptr, out_ptr, N_BLOCKS, BLOCK: tl.constexpr):
    """Program ``b`` counts row ``b`` of ``bucket_ptr`` (int32 ``[rows, N_BLOCKS * BLOCK]``: a bucket 0..15,
    or -1 for no entry) as the count rounds do, into ``out_ptr [rows, 16]``."""
    row = tl.program_id(0)
    c0, c1, c2, c3 = no_counts(BLOCK)
    for i in range(0, N_BLOCKS):
        bucket = tl.load(bucket_ptr + (row * N_BLOCKS + i) * BLOCK + tl.arange(0, BLOCK))
        c0, c1, c2, c3 = add_counts(c0, c1, c2, c3, bucket & 15, bucket >= 0)
    tl.store(out_ptr + row * 16 + tl.arange(0, 16), bucket_totals(c0, c1, c2, c3))


def test_the_bucket_counts_hold_a_whole_split_in_any_bucket():
    """A split of the most blocks, every entry in one bucket, each bucket in turn (totals above 2**15 in every
    16-bit field), then entries spread over the buckets with some left out: the counts are the bincount."""
    g = torch.Generator().manual_seed(0)
    n = SPLIT_BLOCKS * BLOCK
    one = torch.arange(16, dtype=torch.int32)[:, None].expand(16, n)
    spread = torch.randint(-1, 16, (3, n), generator=g, dtype=torch.int32)
    spread[1, : n // 2] = 13  # most in one bucket, the rest spread
    buckets = torch.cat([one, spread]).contiguous()
    out = torch.zeros(buckets.shape[0], 16, dtype=torch.int32, device=DEV)
    _count_kernel[(buckets.shape[0],)](buckets.to(DEV), out, SPLIT_BLOCKS, BLOCK=BLOCK)
    want = torch.stack([torch.bincount(r[r >= 0], minlength=16) for r in buckets.long()]).int()
    assert torch.equal(out.cpu(), want), (out.cpu() - want).nonzero()[:5].tolist()


@triton.jit
def _bucket_log2_kernel(lo_ptr, hi_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    lo, hi = tl.load(lo_ptr + i, mask=i < n), tl.load(hi_ptr + i, mask=i < n)
    tl.store(out_ptr + i, bucket_log2(lo, hi), mask=i < n)


def test_the_bucket_width_is_the_least_power_of_two_whose_16_buckets_cover_the_interval():
    """Spans from below one to past 2**33 (32-bit keys, from any ``lo``), each power of two and its
    neighbours among them: ``16 << s >= hi - lo`` for the least ``s >= 0``."""
    g = torch.Generator().manual_seed(0)
    powers = torch.tensor([1 << e for e in range(35)])
    span = torch.cat(
        [torch.arange(-3, 70), powers - 1, powers, powers + 1, torch.randint(1, 1 << 34, (200,), generator=g)]
    )
    lo = torch.randint(-(1 << 32), 1 << 32, span.shape, generator=g)
    out = torch.zeros_like(span, device=DEV)
    _bucket_log2_kernel[(triton.cdiv(span.numel(), 256),)](
        lo.to(DEV), (lo + span).to(DEV), out, span.numel(), BLOCK=256
    )

    def least(w):
        s = 0
        while (16 << s) < w:
            s += 1
        return s

    assert out.cpu().tolist() == [least(w) for w in span.tolist()]


def test_a_batch_of_32_at_k_3_has_the_late_rows_pool():
    """128 verify rows over Qwen's vocabulary get eight splits a row (not nine, for a ninth program on a few
    SMs), which is where the ``general`` class's late rows list their top-k set in a pool and draw from it."""
    from stepgraph.kernels._sampling_pivot import POOL, pool_entries
    from stepgraph.kernels.chain_sampling import split_layout

    n_splits, _ = split_layout(32 * 4, 151_936)
    assert n_splits == 8 and pool_entries(n_splits) == POOL
