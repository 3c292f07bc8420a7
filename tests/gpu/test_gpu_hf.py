"""HF adapter on the GPU: the step graph equals the eager step; agreement with generate() is measured."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from stepgraph import RunnerConfig, Toggles  # noqa: E402
from stepgraph.adapters.hf import hf_spec_decoder  # noqa: E402
from tests.e2e.test_hf_adapter import PROMPTS, llama  # noqa: E402

pytestmark = pytest.mark.gpu


def models(dtype):
    return llama(64, 2, 4, 2, seed=0).to("cuda", dtype), llama(32, 1, 2, 1, seed=1).to("cuda", dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hf_step_graph_equals_eager(dtype):
    outs = []
    for toggles in (Toggles.all(True), Toggles(step_graph=False)):
        target, draft = models(dtype)
        dec = hf_spec_decoder(
            target, draft, max_requests=4, max_seq_len=96, config=RunnerConfig(toggles=toggles, progress=False)
        )
        outs.append(dec.generate(PROMPTS, max_new_tokens=20))
        if toggles.step_graph:
            assert dec.info()["captured_keys"], dec.info()["keys"]
    assert outs[0] == outs[1]


def test_hf_greedy_agreement_with_generate():
    target, draft = models(torch.float32)
    dec = hf_spec_decoder(
        target, draft, max_requests=4, max_seq_len=96, config=RunnerConfig(toggles=Toggles.all(True), progress=False)
    )
    out = dec.generate(PROMPTS, max_new_tokens=20)
    for prompt, got in zip(PROMPTS, out):
        ids = torch.tensor([prompt], device="cuda")
        ref = target.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=20, do_sample=False, eos_token_id=None
        )
        assert got == ref[0, len(prompt) :].tolist()  # float32: token for token


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hf_paged_cache_gives_the_row_caches_output_with_graphs(dtype):
    """Pages read in place by the paged kernel, a pool that makes requests wait: the rows' tokens."""
    outs = []
    for kv in ({"kv": "paged", "page_size": 8, "num_pages": 16}, {}):
        target, draft = models(dtype)
        dec = hf_spec_decoder(target, draft, max_requests=4, max_seq_len=96, config=RunnerConfig(progress=False), **kv)
        outs.append(dec.generate(PROMPTS, max_new_tokens=20, overlap=True))
        assert dec.info()["captured_keys"] and dec.in_use == (0, 0)
    assert outs[0] == outs[1]


def test_padded_input_ids_on_the_gpu_give_generates_output():
    """The transformers-style generate() with CUDA tensors: left-padded input_ids and attention_mask in,
    the same [B, S + N] tensor as transformers' generate() out (float32), on the input's device."""
    target, draft = models(torch.float32)
    dec = hf_spec_decoder(target, draft, max_requests=4, max_seq_len=96, config=RunnerConfig(progress=False))
    S = max(map(len, PROMPTS))
    ids = torch.zeros(len(PROMPTS), S, dtype=torch.long, device="cuda")
    mask = torch.zeros_like(ids)
    for i, p in enumerate(PROMPTS):
        ids[i, S - len(p) :], mask[i, S - len(p) :] = torch.tensor(p), 1
    out = dec.generate(ids, attention_mask=mask, max_new_tokens=12)
    ref = target.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
    assert out.device == ids.device and torch.equal(out, ref)


@pytest.mark.parametrize(
    "config", [dict(temperature=0.7, top_k=20, top_p=0.8), dict(temperature=0.8, top_p=0.9), dict(min_p=0.1)],
    ids=str,
)  # fmt: skip
def test_sampled_first_tokens_follow_transformers_distribution(config):
    """4096 first tokens sampled through the Triton kernels from a generation config: their total
    variation distance to the distribution transformers' generate() samples from (its scores) is within
    what 4096 draws from that distribution itself show (the largest of 400 simulated runs)."""
    target, draft = models(torch.float32)
    target.lm_head.weight.data *= 40  # logits with a spread (std about 6), not near-uniform
    prompt = PROMPTS[1]
    ids = torch.tensor([prompt], device="cuda")
    hf = target.generate(
        ids, attention_mask=torch.ones_like(ids), do_sample=True, max_new_tokens=1, output_scores=True,
        return_dict_in_generate=True, **config,
    )  # fmt: skip
    p = torch.softmax(hf.scores[0][0].double(), -1).cpu()
    dec = hf_spec_decoder(
        target, draft, max_requests=64, max_seq_len=32, config=RunnerConfig(progress=False), eos_token_id=None
    )
    draws = []
    for _ in range(64):
        draws += [out[0] for out in dec.generate([prompt] * 64, max_new_tokens=1, do_sample=True, **config)]
    n = len(draws)
    tv = 0.5 * (torch.bincount(torch.tensor(draws), minlength=p.numel()).double() / n - p).abs().sum()
    g = torch.Generator().manual_seed(0)
    sim = [0.5 * (torch.bincount(torch.multinomial(p, n, True, generator=g), minlength=p.numel()) / n - p)
           .abs().sum() for _ in range(400)]  # fmt: skip
    assert (torch.tensor(draws)[:, None] != torch.nonzero(p == 0).view(1, -1)).all()  # nothing filtered out
    assert tv <= max(sim), (float(tv), float(max(sim)))
