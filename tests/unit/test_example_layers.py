"""The example model's layer pieces: RoPE in place against its real-arithmetic form (the one torch.compile
traces), and the additive mask against SDPA's boolean one."""

import torch

from stepgraph.examples.model import _rope, masked_attention


def test_rope_in_place_rotates_queries_and_keys_as_the_compiled_form_does_and_leaves_values():
    g = torch.Generator().manual_seed(0)
    B, T, H, KVH, hd = 2, 3, 4, 2, 8
    angles = torch.rand(B, T, 1, hd // 2, generator=g) * 6.0
    cos, sin = angles.cos(), angles.sin()
    for dtype in (torch.float32, torch.bfloat16):
        qkv = torch.randn(B, T, H + 2 * KVH, hd, generator=g).to(dtype)
        want_q, want_kv = _rope(qkv.clone(), H, KVH, (cos, sin))  # a tuple: the compiled form, new tensors
        values = qkv[:, :, H + KVH :].clone()
        q, kv = _rope(qkv, H, KVH, torch.complex(cos, sin))
        assert q.data_ptr() == qkv.data_ptr() and kv.data_ptr() == qkv[:, :, H:].data_ptr()  # views of qkv
        assert q.shape == (B, T, H, hd) and kv.shape == (B, T, 2, KVH, hd)
        tol = 1e-6 if dtype == torch.float32 else 1e-2  # one rounding of the float32 result apart, at most
        torch.testing.assert_close(q.float(), want_q.float(), atol=tol, rtol=tol)
        torch.testing.assert_close(kv.float(), want_kv.float(), atol=tol, rtol=tol)
        assert torch.equal(kv[:, :, 1], values)  # the values pass untouched
        # a turn of zero leaves a head as it was
        before = qkv.clone()
        _rope(qkv, H, KVH, torch.complex(torch.ones_like(cos), torch.zeros_like(sin)))
        assert torch.equal(qkv, before)


def test_an_additive_mask_gives_the_boolean_masks_attention_bit_for_bit():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 3, 8, generator=g)  # 4 query heads over 2 KV heads, 3 queries, 5 positions
    seen = torch.arange(5)[None, None, None, :] <= torch.tensor([[0, 2, 4], [3, 3, 1]])[:, None, :, None]
    additive = torch.zeros(seen.shape).masked_fill_(~seen, float("-inf"))
    k, v = (torch.randn(2, 2, 5, 8, generator=g) for _ in range(2))
    assert torch.equal(masked_attention(q, k, v, additive), masked_attention(q, k, v, seen))
