"""Tiny temperatures and huge logits: where the largest logit over T leaves float32, every sampling path
gives the argmax (the limit as T -> 0), never a token at the end of the vocabulary."""

import os

import pytest
import torch

from stepgraph.kernels.chain_sampling import chain_verify_sampling, chain_verify_sampling_ref
from stepgraph.kernels.greedy_verify import greedy_chain_verify_ref
from stepgraph.sampling import CLASSES
from stepgraph.speculative.general_verify import chain_verify_sampling_tree

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
#: (temperature, logit scale): every pair overflows float32 in x_max / T for some dtype's range
EXTREMES = [(1e-39, 1.0), (1e-37, 10.0), (1e-30, 1e10), (0.5, 3e38), (1e-20, 1e30), (1e-45, 1e-3)]


def inputs(B, K, V, dtype, scale, temperature, top_k=0, top_p=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(B, K + 1, V, generator=g) * scale).clamp(-3e38, 3e38)
    if dtype != torch.float32:  # within the dtype's range
        x = (torch.randn(B, K + 1, V, generator=g) * min(scale, torch.finfo(dtype).max / 8)).to(dtype)
    drafts = torch.argmax(x.float(), -1)[:, :K].clone()
    drafts[:, K // 2 :] = torch.randint(0, V, (B, K - K // 2), generator=g)  # some rejected
    T = torch.full((B,), temperature)
    return (
        x,
        drafts,
        T,
        torch.full((B,), top_k),
        torch.full((B,), top_p),
        torch.arange(B),
        torch.zeros(B, dtype=torch.long),
    )


MODES = {c.name: c.kernel for c in CLASSES if c.kernel is not None}  # each sampled class's kernel options
#: the top-k of each class's requests here (V = 67): a large one is the general class's, with the top-p
TOP_K = {"top_k": 20, "top_k_top_p": 1000, "general": 2000}
#: every extreme in every dtype for the temperature class; the filtered classes (whose kernels take many more
#: launches in the interpreter) over every dtype at two extremes
CASES = [("temperature", d, *e) for d in DTYPES for e in EXTREMES] + [
    (m, d, *e) for m in MODES if m != "temperature" for d in DTYPES for e in (EXTREMES[0], EXTREMES[2])
]


@pytest.mark.parametrize("mode,dtype,temperature,scale", CASES, ids=str)
def test_overflowing_rows_sample_the_argmax_on_every_path(mode, dtype, temperature, scale):
    top_k = TOP_K.get(mode, 0)
    mode = MODES[mode]
    if dtype == torch.float16 and temperature > 1e-38 and scale > 1e4:
        scale = 1e4
    x, d, T, tk, tp, seed, off = inputs(2, 2, 67, dtype, scale, temperature, top_k=top_k, top_p=0.9)
    z_max = x.float().amax(-1) * (1.0 / T.float()[:, None])
    if torch.isfinite(z_max).all():
        pytest.skip("this pair does not overflow in this dtype")
    greedy = greedy_chain_verify_ref(x, d)
    for verify in (chain_verify_sampling, chain_verify_sampling_ref, chain_verify_sampling_tree):
        out = verify(x, d, T, tk, tp, seed, off.clone(), **mode)
        rows = ~torch.isfinite(z_max)  # [B, K+1]: these rows are the argmax's
        every = rows.all(-1)
        assert torch.equal(out.tokens[every], greedy.emitted[every]), verify.__name__
        assert (out.tokens < x.shape[-1]).all() and (out.tokens >= -1).all()


def test_a_sampled_generate_at_a_tiny_temperature_is_the_greedy_decode():
    from stepgraph import SamplingParams, SpecDecoder
    from stepgraph.examples.model import build, greedy_reference

    target, draft = build("tiny")
    dec = SpecDecoder.for_example(target, draft)
    prompts = [[5, 17, 99, 3], [42, 7]]
    for t in (1e-39, 1e-37):
        out = dec.generate(prompts, max_new_tokens=8, sampling=SamplingParams(temperature=t))
        assert out == [greedy_reference(target, p, 8) for p in prompts], t


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="records the interpreter's launches")
@pytest.mark.parametrize("mode", list(MODES))
def test_every_sampling_launch_rounds_each_product_apart(mode, monkeypatch):
    """On a GPU a contracted ``x * inv_t - m`` (one fused multiply-add) carries the product's rounding error
    into ``exp``: 1e30 at T = 1e-36, where a one-hot row then loses its only token. Every launch of the
    sampling path asks for no contraction (the interpreter never contracts, so the launches are checked)."""
    from triton.runtime.interpreter import InterpretedFunction

    launches = []
    run = InterpretedFunction.run

    def recording(self, *args, **kwargs):
        launches.append((self.fn.__name__, kwargs.get("enable_fp_fusion")))
        return run(self, *args, **kwargs)

    monkeypatch.setattr(InterpretedFunction, "run", recording)
    x, d, T, tk, tp, seed, off = inputs(2, 2, 67, torch.float32, 8.0, 0.7, top_k=20, top_p=0.9)
    chain_verify_sampling(x, d, T, tk, tp, seed, off, **MODES[mode])
    assert launches and all(fusion is False for _, fusion in launches), launches
