"""Shared helpers for the kernels: where Triton can run, and input checks with clear messages."""

from __future__ import annotations

import functools

import torch
import triton
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

BATCH_SHAPED_ARGS = (
    "K", "K1", "N", "R", "T", "r", "n_rows", "num_rows", "n_splits", "n_copy", "top_n",
    "stride_draft", "stride_draft_b",
)  # fmt: skip
"""Integer arguments of the kernels whose values follow the batch size, the draft length or a round number.
Triton specializes an int argument on being 1 and on being a multiple of 16, and compiles a kernel variant for
each class it meets: left specialized, these would cost a compile per key at warm-up. Sizes that give loads
their alignment (``V``, the logits' strides, ``SPLIT``) stay specialized: they do not change with the key."""

jit_any_batch = triton.jit(do_not_specialize=BATCH_SHAPED_ARGS)
"""``@triton.jit`` for a kernel launched at every key, with :data:`BATCH_SHAPED_ARGS` unspecialized: its
variants then differ only by their ``tl.constexpr`` arguments (power-of-two sizes such as ``NS_P2``)."""

EXACT_ROUNDING = {"enable_fp_fusion": False}
"""Launch options of the kernels that scale logits (``x * inv_t - m``): no multiply-add contraction, so each
product rounds as in the torch reference. Contracted, the product's rounding error (half an ulp of
``x / T``: 1e30 at T = 1e-36) lands inside ``exp`` and a one-hot row loses its only token."""


def triton_interprets() -> bool:
    """Whether Triton runs kernels through its CPU interpreter (``TRITON_INTERPRET``, as Triton itself reads
    it: its ``knobs``)."""
    from triton import knobs

    return bool(knobs.runtime.interpret)


def use_triton(t: torch.Tensor) -> bool:
    """True when ``t``'s device runs Triton: CUDA, or the CPU through Triton's interpreter."""
    if t.device.type == "cuda":
        return True
    return t.device.type == "cpu" and triton_interprets()


def is_capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def written_into(result, out: dict | None):
    """A reference's ``result`` (a NamedTuple) with each field named in ``out`` copied into that tensor and
    returned in its place: a reference given ``out=`` writes where its kernel would."""
    if not out:
        return result
    placed = {}
    for name, t in out.items():
        t.copy_(getattr(result, name))
        placed[name] = t
    return result._replace(**placed)


def check(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


def check_same_device(name: str, t: torch.Tensor, ref: torch.Tensor, ref_name: str) -> None:
    check(t.device == ref.device, f"{name} is on {t.device} but {ref_name} is on {ref.device}; put them on one device")


def next_pow2(n: int) -> int:
    return triton.next_power_of_2(max(1, int(n)))


def vocab_split(rows: int, vocab: int, *, block: int, target_programs: int = 264, max_block_iters: int = 8) -> int:
    """Vocabulary elements per program for a two-stage reduction over ``rows`` rows of ``vocab``.

    Aims for about ``target_programs`` programs (two waves on 132 SMs) while keeping each program's
    loop short; the result is a multiple of ``block``.
    """
    blocks = triton.cdiv(vocab, block)
    per_row = max(1, target_programs // max(rows, 1))
    iters = max(1, min(max_block_iters, triton.cdiv(blocks, per_row)))
    return iters * block


@functools.cache
def _grid_dependency_control(index: int) -> bool:
    """Whether device ``index`` has programmatic dependent launch (sm_90 and up)."""
    return torch.cuda.get_device_capability(index)[0] >= 9


def dependent_launch(t: torch.Tensor, on: bool = True) -> dict:
    """Launch options of a kernel that calls :func:`after_previous` first, for the device of ``t``: with
    ``on``, on sm_90 and up, it launches as a programmatic dependent of the kernel before it in the stream
    (in a CUDA graph too). Its programs are then placed while that kernel runs and wait for it to end at
    their start, so the launch costs less of the time between the two. Elsewhere, plain stream order."""
    on = on and t.is_cuda and not triton_interprets()
    on = on and _grid_dependency_control(t.device.index if t.device.index is not None else torch.cuda.current_device())
    return {"GDC": on, "launch_pdl": on}


@triton.jit
def after_previous():
    """A dependent launch's first step (:func:`dependent_launch`, whose ``GDC`` a kernel tests before it calls
    this, so that the interpreter makes no call): wait until the kernel before has ended and its writes are
    seen, then let the kernel after this one be placed. Before the wait the program reads nothing that kernel
    may write."""
    gdc_wait()
    gdc_launch_dependents()
