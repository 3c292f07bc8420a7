"""A split schedule for :func:`~stepgraph.kernels.decode_attention.planned_paged_attention`, planned on the
host before each replay from the batch's lengths, as FlashInfer's CUDA-graph wrappers plan theirs.

The fixed schedule of :func:`~stepgraph.kernels.decode_attention.paged_attention` splits every request's
whole ``max_seq_len`` into the same number of pieces, chosen from the batch size alone: at a large batch
it takes one piece per request, so the step waits for whichever request is longest, and at any batch the
pieces past a request's length are launched to do nothing. A plan cuts the work there is instead: the
batch's positions (rounded up to blocks) into about ``TARGET_PROGRAMS / kv_heads`` pieces of equal size,
each inside one request, so a long request is spread over many programs and a short one takes one.

The grid stays fixed per batch size (``max_items(batch, kv_heads, max_len)`` pieces, unused ones empty), so a step
graph captured once serves every plan; only the plan's values change, uploaded before each replay
(:class:`stepgraph.kv.split_plan.SplitPlan` keeps a key's plan on the device and uploads it).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stepgraph.kernels.decode_attention import BLOCK_N, TARGET_PROGRAMS


def max_items(batch: int, kv_heads: int, max_len: int | None = None) -> int:
    """Pieces a plan for ``batch`` rows may hold: the target (at most a piece per block of ``max_len``
    positions per row, where given), plus one per row for its rounding."""
    target = max(1, TARGET_PROGRAMS // kv_heads)
    if max_len is not None:
        target = min(target, batch * -(-max_len // BLOCK_N))
    return target + batch


def plan_splits(lengths: Sequence[int], batch: int, kv_heads: int, max_len: int | None = None) -> np.ndarray:
    """The plan for ``lengths`` (positions each real batch row may read, at most, up to ``max_len``; rows
    after them are padding): ``[3 * items + batch + 1]`` int32, ``items = max_items(batch, kv_heads,
    max_len)``, laid out as :func:`~stepgraph.kernels.decode_attention.planned_paged_attention` reads it."""
    out = np.zeros(3 * max_items(batch, kv_heads, max_len) + batch + 1, dtype=np.int32)
    fill_plan(memoryview(out).cast("B").cast("i"), lengths, batch, kv_heads, max_len)
    return out


def fill_plan(words: memoryview, lengths: Sequence[int], batch: int, kv_heads: int, max_len: int | None = None) -> int:
    """Write the plan into ``words`` (int32, zero past what an earlier plan used); returns the pieces used.
    Plain Python: for a few dozen rows it is several times quicker than numpy's small-array calls."""
    items = max_items(batch, kv_heads, max_len)
    if len(lengths) > batch:
        raise ValueError(f"{len(lengths)} lengths for a batch of {batch}")
    blocks = [-(-n // BLOCK_N) for n in lengths]
    if max_len is not None:
        cap = -(-max_len // BLOCK_N)
        blocks = [min(b, cap) for b in blocks]
    per_piece = max(1, -(-sum(blocks) // (items - batch)))  # blocks per piece
    span = per_piece * BLOCK_N
    first = 3 * items
    i = 0
    for b, nb in enumerate(blocks):
        words[first + b] = i
        stop = nb * BLOCK_N
        if stop <= span:  # one piece (most rows of a large batch), or none
            if stop:
                words[3 * i], words[3 * i + 1], words[3 * i + 2] = b, 0, stop
                i += 1
            continue
        for start in range(0, stop, span):
            words[3 * i], words[3 * i + 1], words[3 * i + 2] = b, start, min(start + span, stop)
            i += 1
    for b in range(len(blocks), batch + 1):
        words[first + b] = i
    return i
