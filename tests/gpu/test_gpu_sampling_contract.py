"""On the GPU: the torch Philox equals tl.rand, tiny temperatures sample the argmax in every class, and a
seeded request's tokens are the same from the kernels (in the step graph) and from their references."""

import pytest
import torch
import triton
import triton.language as tl

from stepgraph import RunnerConfig, SamplingParams, SpecDecoder, Toggles
from stepgraph.examples.model import build
from stepgraph.kernels.chain_sampling import chain_verify_sampling
from stepgraph.kernels.greedy_verify import greedy_chain_verify_ref
from stepgraph.kernels.philox import philox_uniform
from stepgraph.sampling import sampling_class

pytestmark = pytest.mark.gpu


@triton.jit
def _rand_kernel(seed_ptr, off_ptr, out_ptr):
    i = tl.program_id(0)
    tl.store(out_ptr + i, tl.rand(tl.load(seed_ptr + i), tl.load(off_ptr + i)))


def test_torch_philox_equals_tl_rand_on_cuda():
    g = torch.Generator().manual_seed(0)
    seed = torch.randint(-(2**62), 2**62, (4096,), generator=g).cuda()
    off = torch.randint(0, 2**62, (4096,), generator=g).cuda()
    out = torch.empty(4096, device="cuda")
    _rand_kernel[(4096,)](seed, off, out)
    assert torch.equal(out, philox_uniform(seed, off))


@pytest.mark.parametrize("temperature", [1e-39, 1e-37, 1e-36])
@pytest.mark.parametrize(
    "mode",
    [
        {"filtered": False},
        {"filtered": True, "small_top_k": True},
        {"filtered": True},
        {"filtered": True, "pivot": True, "late": False},
        {"filtered": True, "pivot": True},
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_tiny_temperatures_sample_the_argmax_at_a_real_vocabulary(temperature, mode, dtype):
    B, K, V = 4, 3, 151936
    x = (torch.randn(B, K + 1, V, device="cuda") * 8).to(dtype)
    x[::2] *= 1e3  # half the requests' rows overflow at every temperature here
    d = torch.argmax(x.float(), -1)[:, :K].contiguous()
    d[:, 1] = 7  # a rejection
    T = torch.full((B,), temperature, device="cuda")
    tk = torch.full((B,), 40 if mode.get("small_top_k") else 0, device="cuda")
    tp = torch.full((B,), 0.9, device="cuda")
    out = chain_verify_sampling(
        x, d, T, tk, tp, torch.arange(B, device="cuda"), torch.zeros(B, device="cuda", dtype=torch.long), **mode
    )
    assert torch.equal(out.tokens, greedy_chain_verify_ref(x, d).emitted)


@pytest.mark.parametrize(
    "sp", [SamplingParams(temperature=1.0, top_k=40, seed=3), SamplingParams(temperature=0.8, top_p=0.9, seed=4)]
)
def test_seeded_tokens_are_the_same_from_the_kernels_and_their_references(sp):
    target, draft = build("tiny", device="cuda")
    prompts = [[5, 17, 99, 3], [42, 7], [1, 2, 3]]
    outs = []
    for toggles in (Toggles.all(True), Toggles.all(True).with_piece("two_launch_sampling", False)):
        dec = SpecDecoder.for_example(target, draft, max_batch=4, config=RunnerConfig(toggles=toggles, progress=False))
        dec.warmup(4, sp.sampling)
        outs.append(dec.generate(prompts, max_new_tokens=16, sampling=[sp] * 3))
        assert dec.info()["captured_keys"]
        dec.release()
    assert outs[0] == outs[1]


@pytest.mark.parametrize("name", ["temperature", "top_k", "top_k_top_p", "top_p", "general"])
def test_the_kernel_draws_the_references_tokens_at_a_real_vocabulary(name):
    """64 requests of each sampled class at V = 151,936, under its kernel options; ``general``: top-k
    1100..2999 with the top-p (late pivot requests, whose rows draw from the pool their last count lists at
    this batch)."""
    from stepgraph.kernels.chain_sampling_ref import chain_verify_sampling_ref

    torch.manual_seed(5)
    B, K, V = 64, 3, 151936
    logits = (torch.randn(B, K + 1, V, device="cuda") * 3).bfloat16()
    drafts = torch.argmax(logits[:, :K].float(), -1)
    drafts[1::2] = torch.randint(0, V, (B // 2, K), device="cuda")
    T = torch.rand(B, device="cuda") + 0.3
    k = torch.zeros(B, dtype=torch.long, device="cuda")
    if name == "top_k":
        k = torch.randint(1, 200, (B,), device="cuda")
    if name == "general":
        k = torch.randint(1100, 3000, (B,), device="cuda")
    mode = sampling_class(name).kernel
    p = torch.full((B,), 0.9, device="cuda")
    seed = torch.randint(0, 2**62, (B,), device="cuda")
    off = torch.zeros(B, dtype=torch.long, device="cuda")
    got = chain_verify_sampling(logits, drafts, T, k, p, seed, off.clone(), **mode)
    ref = chain_verify_sampling_ref(logits, drafts, T, k, p, seed, off.clone(), **mode)
    same = (got.tokens == ref.tokens).all(-1)
    assert same.float().mean() > 0.95  # a float-rounding boundary may part a row or two; never systematically
