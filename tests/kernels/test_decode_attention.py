"""The example model's decode attention against masked SDPA over gathered rows (interpreter on CPU)."""

import pytest
import torch

from stepgraph.examples.model import build
from stepgraph.kernels.decode_attention import decode_attention, fits, reference_attention

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def case(B, T, H, KVH, hd, S, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    R = B + 2
    kv = torch.randn(R, 2, KVH, S, hd, generator=g).to(dtype).to(DEV)
    qkv = torch.randn(B, T, H + 2 * KVH, hd, generator=g).to(dtype).to(DEV)
    q = qkv[:, :, :H]  # a strided view, as in the model
    rows = torch.randperm(R, generator=g)[:B].to(DEV)
    last = torch.randint(T - 1, S, (B,), generator=g)
    last[0] = S - 1  # one request at the very end of the cache, one at the start
    last[-1] = T - 1
    positions = (last[:, None] - T + 1 + torch.arange(T)[None, :]).to(DEV)
    return q, kv, rows, positions


@pytest.mark.parametrize("T", [1, 4])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2), (torch.float16, 5e-3)])
def test_matches_masked_sdpa_on_odd_lengths(T, dtype, tol):
    q, kv, rows, positions = case(B=3, T=T, H=4, KVH=2, hd=16, S=77, dtype=dtype)
    got = decode_attention(q, kv, rows, positions, 0.25)
    ref = reference_attention(q, kv, rows, positions, 0.25)
    assert got.shape == (3, T, 4, 16) and got.dtype == dtype
    torch.testing.assert_close(got.float(), ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("hd", [8, 24, 80])
def test_head_dims_that_are_small_or_not_a_power_of_two(hd):
    """tl.dot needs 16 or more along K: the kernel pads the head dimension and masks it."""
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        q, kv, rows, positions = case(B=2, T=3, H=4, KVH=2, hd=hd, S=45, dtype=dtype)
        got = decode_attention(q, kv, rows, positions, hd**-0.5)
        assert got.shape == (2, 3, 4, hd)
        torch.testing.assert_close(
            got.float(), reference_attention(q, kv, rows, positions, hd**-0.5), atol=tol, rtol=tol
        )


def test_strided_rows_are_read_by_their_stride():
    q, kv, rows, positions = case(B=3, T=2, H=4, KVH=2, hd=16, S=40, dtype=torch.float32)
    column = torch.stack([rows, rows.flip(0)], 1)[:, 0]  # element b of a column is not at b
    torch.testing.assert_close(
        decode_attention(q, kv, column, positions, 0.25), decode_attention(q, kv, rows, positions, 0.25), atol=0, rtol=0
    )


def test_keys_past_a_query_position_are_invisible():
    q, kv, rows, positions = case(B=2, T=2, H=2, KVH=1, hd=16, S=64, dtype=torch.float32)
    before = decode_attention(q, kv, rows, positions, 0.25)
    kv[rows[1], :, :, int(positions[1, -1]) + 1 :] = float("nan")  # garbage beyond request 1's last position
    after = decode_attention(q, kv, rows, positions, 0.25)
    torch.testing.assert_close(after[1], before[1], atol=0, rtol=0)


def test_bad_shapes_are_refused():
    q, kv, rows, positions = case(B=1, T=1, H=4, KVH=2, hd=16, S=32, dtype=torch.float32)
    with pytest.raises(ValueError, match="do not fit"):
        decode_attention(q[..., :8], kv, rows, positions, 0.25)
    assert fits(16, 8, 32) and not fits(16, 8, 33)
    q, kv, rows, positions = case(B=1, T=33, H=4, KVH=2, hd=16, S=64, dtype=torch.float32)
    with pytest.raises(ValueError, match="use SDPA"):
        decode_attention(q, kv, rows, positions, 0.25)


def test_model_with_decode_attention_matches_sdpa_model():
    outs = []
    for attention in ("sdpa", "triton"):
        target, _ = build("tiny", attention=attention, max_seq_len=48, device=DEV)
        rows = torch.tensor([2, 0], device=DEV)
        prompt = torch.randint(0, 512, (2, 9), generator=torch.Generator().manual_seed(1)).to(DEV)
        positions = torch.arange(13, device=DEV)[None].expand(2, 13)
        target(prompt, positions[:, :9], rows)  # prefill (SDPA in both)
        logits, hidden = target(prompt[:, :4], positions[:, 9:], rows)  # verify-shaped
        outs.append((logits, hidden))
    torch.testing.assert_close(outs[1][0], outs[0][0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(outs[1][1], outs[0][1], atol=1e-4, rtol=1e-4)


def test_unknown_attention_is_refused():
    with pytest.raises(ValueError, match="attention must be"):
        build("tiny", attention="flash")


def test_triton_attention_on_cpu_without_the_interpreter_is_refused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        build("tiny", attention="triton", device="cpu")
