"""Triton's ``tl.rand`` in plain torch, bit for bit: Philox4x32-10 keyed by a 64-bit seed, the counter's low
and high words from a 64-bit offset, the first output word mapped to a float32 in ``[0, 1)``.

The sampling kernels draw their random numbers with ``tl.rand(seed, offset)``; their torch references
draw the same numbers here, so a seeded request gets the same tokens on every path (a GPU, Triton's CPU
interpreter, the torch references of a plain CPU) and whoever its batch mates are.

Cost: 10 rounds of a few int64 multiplies per number; the references draw K + 2 numbers per request.
"""

from __future__ import annotations

import torch

_MASK = 0xFFFFFFFF
_KEY_A, _KEY_B = 0x9E3779B9, 0xBB67AE85  # the key schedule's constants (32-bit Philox)
_ROUND_A, _ROUND_B = 0xD2511F53, 0xCD9E8D57  # the round multipliers
_SCALE = 4.6566127342e-10  # Triton's uint_to_uniform_float: 2^-31, as float32


def _mul32(a: int, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(high, low)`` 32-bit words of ``a * b`` for a 32-bit constant ``a`` and 32-bit values ``b``
    (int64 tensors), without overflowing int64: ``a`` in 16-bit halves."""
    a_hi, a_lo = a >> 16, a & 0xFFFF
    lo_part = a_lo * b  # < 2^48
    hi_part = a_hi * b  # < 2^48
    high = (hi_part + (lo_part >> 16)) >> 16
    low = (((hi_part & 0xFFFF) << 16) + lo_part) & _MASK
    return high & _MASK, low


def philox_uniform(seed: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """``tl.rand(seed, offset)`` for each element: ``seed`` and ``offset`` int64 tensors of one shape (or
    broadcastable); returns float32 in ``[0, 1)`` of that shape, equal bit for bit to the kernel's."""
    seed, offset = torch.broadcast_tensors(seed.long(), offset.long())
    k0, k1 = seed & _MASK, (seed >> 32) & _MASK
    c0, c1 = offset & _MASK, (offset >> 32) & _MASK
    c2 = torch.zeros_like(c0)
    c3 = torch.zeros_like(c0)
    for _ in range(10):
        hi_b, lo_b = _mul32(_ROUND_B, c2)
        hi_a, lo_a = _mul32(_ROUND_A, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = (k0 + _KEY_A) & _MASK, (k1 + _KEY_B) & _MASK
    x = torch.where(c0 >= 2**31, c0 - 2**32, c0)  # the word as int32
    x = torch.where(x < 0, -x - 1, x)
    # a Python float multiplies a float32 tensor in float32, as Triton's constant does (and makes no tensor:
    # nothing is copied to the device, so a CUDA graph can capture this)
    return x.to(torch.float32) * _SCALE


def pivot_counter(K1: int, rnd, row):
    """The counter of the number that draw ``rnd`` (0, 1, ...) of verify row ``row`` takes in a request's
    stream, past the coins and the sample of :func:`verify_uniforms` (ints or tensors)."""
    return K1 + 1 + rnd * K1 + row


def verify_stream(offset: torch.Tensor, K1: int) -> torch.Tensor:
    """A request's stream at ``offset`` (``[B]`` int64), shifted into the counter's high word."""
    return (offset.long() * (K1 + 1) + K1) << 32


def verify_uniforms(seed: torch.Tensor, offset: torch.Tensor, K: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The numbers a chain verify of ``K`` drafts draws for each request (``seed``, ``offset`` ``[B]``):
    ``(coins [B, K], final [B])``, the acceptance coin of each draft and the sample's number, from the
    request's stream at this offset (the streams :func:`stepgraph.kernels.chain_verify_sampling` uses)."""
    K1 = K + 1
    stream = verify_stream(offset, K1)  # [B]
    counters = torch.arange(K1 + 1, device=seed.device)  # draft coins 0..K-1, then the sample at K1
    numbers = philox_uniform(seed.long()[:, None], stream[:, None] | counters[None, :])
    return numbers[:, :K], numbers[:, K1]
