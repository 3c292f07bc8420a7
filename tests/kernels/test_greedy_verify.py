"""greedy_chain_verify against its reference, bit for bit (Triton interpreter on CPU, CUDA on GPU)."""

import pytest
import torch

from stepgraph.kernels.greedy_verify import greedy_chain_verify, greedy_chain_verify_ref
from tests.conftest import HAS_CUDA

DEV = "cuda" if HAS_CUDA else "cpu"
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SHAPES = [(1, 3, 7), (3, 3, 1500), (2, 0, 33), (5, 1, 2049), (4, 5, 4097), (2, 2, 9001)]


def adversarial(B, K1, V, dtype):
    x = torch.randn(B, K1, V, device=DEV).to(dtype)
    x[0, 0] = float("-inf")  # all -inf row -> 0
    if V > 40:
        x[0, -1, 13] = float("nan")
        x[0, -1, 11] = float("nan")  # first NaN wins
    if B > 1 and V > 2100:
        x[1, 0] = 0
        x[1, 0, 1030] = 4.0
        x[1, 0, 2040] = 4.0  # tie across blocks -> lowest index
    if B > 2:
        x[2, 0] = -0.0
        x[2, 0, 5] = 0.0  # -0 == +0 -> lowest index
    if B > 3 and V > 9000:
        x[3, -1, 20] = float("inf")
        x[3, -1, 9000] = float("nan")  # NaN beats +inf
    return x


def drafts_for(x, mismatch=True):
    d = torch.argmax(x, -1)[:, :-1].clone()
    if mismatch and d.shape[0] > 1 and d.shape[1] > 1:
        d[1, 1] += 1
    return d


def poisoned_out(B, K1):
    return {
        "predict": torch.full((B, K1), -7, dtype=torch.int64, device=DEV),
        "num_accepted": torch.full((B,), -7, dtype=torch.int64, device=DEV),
        "bonus": torch.full((B,), -7, dtype=torch.int64, device=DEV),
        "select": torch.full((B,), -7, dtype=torch.int64, device=DEV),
        "emitted": torch.full((B, K1), -7, dtype=torch.int64, device=DEV),
    }


@pytest.mark.parametrize("one_launch", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,K,V", SHAPES)
def test_bitwise_equal_to_reference(B, K, V, dtype, one_launch):
    x = adversarial(B, K + 1, V, dtype)
    d = drafts_for(x)
    s = torch.randint(0, 50, (B,), device=DEV, dtype=torch.int32)
    ws = torch.zeros(B, dtype=torch.int32, device=DEV) if one_launch else None
    got = greedy_chain_verify(
        x, d, s, with_accept_len=True, with_select=True, with_emitted=True, out=poisoned_out(B, K + 1), workspace=ws
    )
    ref = greedy_chain_verify_ref(x, d, s)
    for field in got._fields:
        assert torch.equal(getattr(got, field), getattr(ref, field)), field
    assert torch.equal(got.predict, torch.argmax(x, -1))
    if ws is not None:
        assert (ws == 0).all()  # the counters are reset for the next launch


def test_small_block_config_and_int32_drafts():
    x = adversarial(3, 4, 3001, torch.bfloat16)
    d = drafts_for(x).to(torch.int32)
    got = greedy_chain_verify(x, d, config={"block": 128, "num_warps": 2, "target_programs": 40})
    assert torch.equal(got.predict, torch.argmax(x, -1))
    assert torch.equal(got.num_accepted, greedy_chain_verify_ref(x, d).num_accepted)


def test_acceptance_semantics():
    V = 50
    x = torch.full((2, 4, V), -1.0, device=DEV)
    for b, argmaxes in enumerate([[3, 4, 5, 6], [7, 8, 9, 10]]):
        for j, a in enumerate(argmaxes):
            x[b, j, a] = 1.0
    d = torch.tensor([[3, 4, 5], [7, 1, 9]], device=DEV)
    r = greedy_chain_verify(
        x, d, torch.tensor([10, 20], device=DEV), with_accept_len=True, with_select=True, with_emitted=True
    )
    assert r.num_accepted.tolist() == [3, 1]  # all accepted; first mismatch at j=1 (9 after it does not count)
    assert r.bonus.tolist() == [6, 8]
    assert r.accept_len.tolist() == [4, 2] and r.new_seq_lens.tolist() == [14, 22] and r.select.tolist() == [3, 5]
    assert r.emitted.tolist() == [[3, 4, 5, 6], [7, 8, -1, -1]]


def test_empty_batch_and_k0():
    x = torch.randn(0, 4, 10, device=DEV)
    r = greedy_chain_verify(x, torch.zeros(0, 3, dtype=torch.int64, device=DEV))
    assert r.predict.shape == (0, 4)
    x = torch.randn(3, 1, 10, device=DEV)
    r = greedy_chain_verify(x, torch.zeros(3, 0, dtype=torch.int64, device=DEV))
    assert torch.equal(r.bonus, torch.argmax(x[:, 0], -1)) and (r.num_accepted == 0).all()


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: (torch.randn(2, 10), torch.zeros(2, 1, dtype=torch.long)), r"\[B, K\+1, V\]"),
        (lambda: (torch.randn(2, 3, 10).double(), torch.zeros(2, 2, dtype=torch.long)), "dtype"),
        (lambda: (torch.randn(2, 3, 10), torch.zeros(2, 3, dtype=torch.long)), "K mismatch"),
        (lambda: (torch.randn(2, 3, 10), torch.zeros(2, 2)), "int32 or int64"),
        (lambda: (torch.randn(2, 10, 3).transpose(1, 2), torch.zeros(2, 2, dtype=torch.long)), "unit stride"),
        (lambda: (torch.randn(2, 3, 10), torch.zeros(3, 2, dtype=torch.long)), "rows"),
    ],
)
def test_bad_inputs_raise_clear_errors(make, match):
    x, d = make()
    with pytest.raises(ValueError, match=match):
        greedy_chain_verify(x.to(DEV), d.to(DEV))


def test_strided_seq_lens_are_refused_by_name():
    x, d = torch.randn(2, 3, 10, device=DEV), torch.zeros(2, 2, dtype=torch.long, device=DEV)
    lens = torch.tensor([[5, 9], [7, 9]], device=DEV)[:, 0]  # a column: element b is not at b
    with pytest.raises(ValueError, match="seq_lens must be contiguous"):
        greedy_chain_verify(x, d, lens)


def test_bad_workspace():
    x = torch.randn(2, 3, 10, device=DEV)
    with pytest.raises(ValueError, match="workspace"):
        greedy_chain_verify(
            x, torch.zeros(2, 2, dtype=torch.long, device=DEV), workspace=torch.zeros(1, dtype=torch.int32, device=DEV)
        )
