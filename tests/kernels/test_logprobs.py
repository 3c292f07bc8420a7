"""The log-probabilities kernel against its torch reference: ids bit for bit, scores within one float32 ulp (the
float64 sum of the exponentials runs in another order; in the interpreter they come out bit for bit too).
Odd vocabularies across block and split edges, every dtype, every top_n, ties at the cut, NaN, +-inf, rows
with fewer finite entries than top_n, a row of one value (the radix path), strided logits and bad input."""

import pytest
import torch

from stepgraph.kernels.logprobs import TOP_N_MAX, row_lse_ref, token_logprobs, token_logprobs_ref
from tests.conftest import HAS_CUDA

DEV = "cuda" if HAS_CUDA else "cpu"


def ulps(a: torch.Tensor, b: torch.Tensor) -> int:
    """The largest distance in float32 steps between ``a`` and ``b`` (NaN and infinities must match)."""
    assert torch.equal(torch.isnan(a), torch.isnan(b))
    assert torch.equal(torch.isinf(a), torch.isinf(b)) and torch.equal(a[torch.isinf(a)], b[torch.isinf(b)])
    fin = torch.isfinite(a)
    if not fin.any():
        return 0
    ia, ib = (t[fin].view(torch.int32).long() for t in (a, b))
    ia, ib = (torch.where(i < 0, -(2**31) - i, i) for i in (ia, ib))  # monotone in the float's value
    return int((ia - ib).abs().max())


def check(logits, tokens, n):
    got, want = token_logprobs(logits, tokens, n), token_logprobs_ref(logits, tokens, n)
    assert got.top_ids.shape == (*tokens.shape, n) and got.top_ids.dtype == torch.int64
    assert got.logprobs.dtype == got.top_logprobs.dtype == torch.float32
    assert torch.equal(got.top_ids, want.top_ids)
    assert ulps(got.logprobs, want.logprobs) <= 1
    assert ulps(got.top_logprobs, want.top_logprobs) <= 1
    return got


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("B,R,V", [(2, 3, 37), (1, 2, 1031), (3, 1, 4099)])
def test_kernel_equals_its_reference(B, R, V, dtype):
    g = torch.Generator().manual_seed(V)
    x = (torch.randn(B, R, V, generator=g) * 3).to(dtype).to(DEV)
    tokens = torch.randint(-1, V, (B, R), generator=g).to(DEV)
    for n in (0, 1, 5, TOP_N_MAX):
        check(x, tokens, n)


def test_ties_nan_infinities_and_short_rows():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 2, 600, generator=g)
    x[0, 0, :590] = float("-inf")  # 10 finite entries: the other 10 of the top 20 are -inf, lowest ids first
    x[0, 1, 5] = float("nan")
    x[1, 0, ::3] = 1.0  # 200 ties above the rest
    x[1, 1] = x[1, 1].round()  # few values, many ties everywhere
    x[2, 0, 7] = float("inf")
    x[2, 1] = float("-inf")  # nothing finite: lse -inf, scores NaN
    tokens = torch.tensor([[3, -1], [0, 599], [7, 2]])
    for dtype in (torch.float32, torch.bfloat16):
        for n in (0, 3, TOP_N_MAX):
            got = check(x.to(dtype).to(DEV), tokens.to(DEV), n)
        assert got.top_ids[0, 0, 10:].tolist() == list(range(10))
        assert torch.isnan(got.logprobs[2, 1]) and got.logprobs[2, 0] != got.logprobs[2, 0]  # inf - inf


def test_a_row_of_one_value_takes_the_radix_path():
    """Every entry >= the bound: far more than the lists hold, so the row's own radix select runs."""
    x = torch.zeros(2, 1, 3000)
    x[1, 0, 2500:] = -1.0
    got = check(x.to(DEV), torch.tensor([[2], [2999]], device=DEV), TOP_N_MAX)
    assert got.top_ids[0, 0].tolist() == list(range(TOP_N_MAX))


def test_scores_are_log_softmax_and_topk():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 4, 513, generator=g).to(DEV)
    tokens = torch.randint(0, 513, (2, 4), generator=g).to(DEV)
    got = token_logprobs(x, tokens, 7)
    ref = torch.log_softmax(x.float(), -1)
    torch.testing.assert_close(got.logprobs, ref.gather(-1, tokens[..., None])[..., 0])
    torch.testing.assert_close(got.top_logprobs, ref.topk(7, -1).values)
    torch.testing.assert_close(row_lse_ref(x), torch.logsumexp(x, -1, keepdim=True))


def test_strided_logits_and_tokens_are_read_by_their_strides():
    g = torch.Generator().manual_seed(3)
    wide = torch.randn(3, 5, 300, generator=g).to(DEV)
    x = wide[:, 1:4]  # [3, 3, 300], strides (1500, 300, 1)
    tokens = torch.randint(0, 300, (3, 6), generator=g).to(DEV)[:, ::2]
    check(x, tokens, 4)


@pytest.mark.parametrize(
    "logits,tokens,n,message",
    [
        (torch.zeros(2, 30), torch.zeros(2, dtype=torch.long), 1, "logits must be"),
        (torch.zeros(2, 1, 30, dtype=torch.int32), torch.zeros(2, 1, dtype=torch.long), 1, "dtype"),
        (torch.zeros(2, 1, 30), torch.zeros(2, 2, dtype=torch.long), 1, "tokens must be"),
        (torch.zeros(2, 1, 30), torch.zeros(2, 1), 1, "int32 or int64"),
        (torch.zeros(2, 1, 30), torch.zeros(2, 1, dtype=torch.long), 21, "top_n"),
        (torch.zeros(2, 1, 4), torch.zeros(2, 1, dtype=torch.long), 5, "top_n"),
        (torch.zeros(2, 1, 30), torch.zeros(2, 1, dtype=torch.long), True, "top_n"),
    ],
)
def test_bad_input_is_refused_by_name(logits, tokens, n, message):
    with pytest.raises(ValueError, match=message):
        token_logprobs(logits.to(DEV), tokens.to(DEV), n)


def test_an_empty_batch():
    got = token_logprobs(torch.zeros(0, 4, 50, device=DEV), torch.zeros(0, 4, dtype=torch.long, device=DEV), 3)
    assert got.logprobs.shape == (0, 4) and got.top_ids.shape == (0, 4, 3)


@pytest.mark.parametrize("chunk", [None, 3], ids=["whole", "chunked"])
def test_prompt_logprobs_through_the_kernels(chunk):
    """A decoder's prompt scores through the fused kernels (positions past a chunk's end score token -1),
    against log_softmax of one forward over the prompt."""
    from stepgraph.examples.model import build
    from stepgraph.speculative.decoder import SpecDecoder
    from tests.e2e.test_logprobs import prompt_reference

    target, draft = build("tiny", num_layers=1, device=DEV)
    prompts = [[5, 17, 99, 3, 8, 21, 40], [1, 2, 3]]
    dec = SpecDecoder.for_example(target, draft, prompt_logprobs=2, prefill_chunk=chunk, max_batch=2)
    assert dec.toggles.fused_logprobs
    for p, r in zip(prompts, dec.serve(dec.make_requests(prompts, 2))):
        ref = prompt_reference(target, p)[:-1]
        want = ref.gather(-1, torch.tensor(p[1:], device=ref.device)[:, None])[:, 0].cpu()
        torch.testing.assert_close(torch.tensor(r.prompt_logprobs[1:]), want, rtol=0, atol=2e-6)
        assert [[t for t, _ in top] for top in r.prompt_top_logprobs[1:]] == ref.topk(2, -1).indices.tolist()
