"""The prompt-lookup kernel against its torch reference, bit for bit: odd row lengths across block edges,
small alphabets (many matches, ties between orders and occurrences), queries at 0 and at the last
position, rows shared by queries, every n-gram range, and the dtypes of the one-hot rows."""

import random

import pytest
import torch

from stepgraph.kernels.prompt_lookup import ROW_BLOCK, propose, propose_ref
from tests.conftest import HAS_CUDA

DEV = "cuda" if HAS_CUDA else "cpu"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("L,V,ngrams", [(9, 5, (1, 1)), (ROW_BLOCK + 3, 301, (1, 3)), (40, 1000, (2, 4))])
def test_propose_equals_its_reference(L, V, ngrams, dtype):
    rng = random.Random(L)
    B, T = 4, 3
    rows = torch.tensor([[rng.randrange(a) for _ in range(L)] for a in (2, 3, 7, V, 1)], dtype=torch.int32)
    row_ids = torch.tensor([0, 3, 1, 0])  # two queries' rows alike
    at = torch.tensor([[0, L - 1, rng.randrange(L)], [L - 1, 1, 2], [L // 2, L - 2, 0], [3, 4, 5]])
    tokens = torch.tensor([[rng.randrange(V + 3) for _ in range(T)] for _ in range(B)])  # some past V: clamped
    args = (rows.to(DEV), row_ids.to(DEV), at.to(DEV), tokens.to(DEV), *ngrams, V, dtype)
    got, want = propose(*args), propose_ref(*args)
    assert got.shape == (B, T, V) and got.dtype == dtype
    assert torch.equal(got, want)
    assert torch.equal(got.sum(-1).float(), torch.ones(B, T, device=DEV))
    strided = torch.stack([row_ids, row_ids], 1).to(DEV)[:, 0]  # a column view: read by its stride
    assert torch.equal(propose(args[0], strided, *args[2:]), want)


def test_greedy_decode_through_the_kernel_equals_the_reference():
    from stepgraph import SpecDecoder
    from stepgraph.drafts import PromptLookupDraft
    from stepgraph.examples.model import build, greedy_reference

    target, _ = build("tiny", device=DEV, num_layers=1, max_seq_len=64)
    dec = SpecDecoder.for_example(target, PromptLookupDraft.for_example(target), num_draft_tokens=2, max_batch=2)
    prompts = [[3, 4, 5] * 4, [9, 8]]
    assert dec.generate(prompts, max_new_tokens=16) == [greedy_reference(target, p, 16) for p in prompts]
