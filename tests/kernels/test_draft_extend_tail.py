import pytest
import torch

from stepgraph.kernels.draft_extend_tail import argmax_rows, draft_extend_tail, draft_extend_tail_ref
from tests.conftest import HAS_CUDA

DEV = "cuda" if HAS_CUDA else "cpu"


@pytest.mark.parametrize("one_launch", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("N,V,D,B", [(4, 7, 1, 1), (12, 3001, 37, 3), (8, 2049, 1030, 5)])
def test_bitwise_equal_to_reference(N, V, D, B, dtype, one_launch):
    x = torch.randn(N, V, device=DEV).to(dtype)
    x[0] = float("-inf")
    x[1, V // 2] = float("nan")
    h = torch.randn(N, D, device=DEV).to(dtype)
    sel = torch.randint(0, N, (B,), device=DEV)
    if B > 2:
        sel[1], sel[2] = -1, N  # padding / out of range: token -1, zero row, no out-of-bounds read
    out_t = torch.full((B,), -7, dtype=torch.int64, device=DEV)
    out_h = torch.full((B, D), 7.0, device=DEV).to(dtype)
    ws = torch.zeros(B, dtype=torch.int32, device=DEV) if one_launch else None
    got = draft_extend_tail(x, h, sel, out_tokens=out_t, out_hidden=out_h, workspace=ws)
    ref = draft_extend_tail_ref(x, h, sel)
    assert torch.equal(got.tokens, ref.tokens) and torch.equal(got.hidden, ref.hidden)
    assert got.tokens.data_ptr() == out_t.data_ptr()


def test_argmax_rows_matches_torch():
    x = torch.randn(9, 5001, device=DEV).bfloat16()
    x[3] = float("-inf")
    x[4, 100] = float("nan")
    assert torch.equal(argmax_rows(x), torch.argmax(x, -1))
    assert torch.equal(argmax_rows(x, workspace=torch.zeros(9, dtype=torch.int32, device=DEV)), torch.argmax(x, -1))


def test_tokens_only_and_errors():
    x = torch.randn(4, 10, device=DEV)
    sel = torch.tensor([3, 0], device=DEV)
    assert draft_extend_tail(x, None, sel).hidden is None
    with pytest.raises(ValueError, match=r"\[N, V\]"):
        draft_extend_tail(x[None], None, sel)
    with pytest.raises(ValueError, match="select"):
        draft_extend_tail(x, None, sel.float())
    with pytest.raises(ValueError, match="hidden"):
        draft_extend_tail(x, torch.randn(3, 5, device=DEV), sel)
    with pytest.raises(ValueError, match="contiguous"):  # element b of a column is not at b
        draft_extend_tail(x, None, torch.tensor([[3, 1], [0, 1]], device=DEV)[:, 0])
    with pytest.raises(ValueError, match="out_tokens must be a contiguous"):
        draft_extend_tail(x, None, sel, out_tokens=torch.zeros(2, 2, dtype=torch.int64, device=DEV)[:, 0])
