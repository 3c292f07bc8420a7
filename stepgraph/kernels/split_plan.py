"""A split schedule for :func:`~stepgraph.kernels.decode_attention.planned_paged_attention`, planned on the
host before each replay from the batch's lengths, as FlashInfer's CUDA-graph wrappers plan theirs.

The fixed schedule of :func:`~stepgraph.kernels.decode_attention.paged_attention` splits every request's
whole ``max_seq_len`` into the same number of pieces, chosen from the batch size alone: at a large batch
it takes one piece per request, so the step waits for whichever request is longest, and at any batch the
pieces past a request's length are launched to do nothing. A plan cuts the work there is instead: the
batch's positions (rounded up to blocks) into about ``TARGET_PROGRAMS / kv_heads`` pieces of equal size,
each inside one request, so a long request is spread over many programs and a short one takes one.

The grid stays fixed per batch size (``max_items(batch, kv_heads)`` pieces, unused ones empty), so a step
graph captured once serves every plan; only the plan's values change, uploaded before each replay.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from stepgraph.copy_in.driver import DriverCalls
from stepgraph.kernels.decode_attention import BLOCK_N, TARGET_PROGRAMS

STAGING = 4  # host buffers per plan in rotation: a buffer is rewritten once the upload that read it is done
# Lengths are planned rounded up to GRAIN positions: the kernel skips the blocks past each request's last
# position at the cost of a comparison, and a plan then changes every GRAIN positions a request grows by,
# not every page.
GRAIN = 4 * BLOCK_N


def max_items(batch: int, kv_heads: int) -> int:
    """Pieces a plan for ``batch`` rows may hold: the target, plus one per row for its rounding."""
    return max(1, TARGET_PROGRAMS // kv_heads) + batch


def plan_splits(lengths: Sequence[int], batch: int, kv_heads: int) -> np.ndarray:
    """The plan for ``lengths`` (positions each real batch row may read, at most; rows after them are
    padding): ``[3 * items + batch + 1]`` int32, ``items = max_items(batch, kv_heads)``, laid out as
    :func:`~stepgraph.kernels.decode_attention.planned_paged_attention` reads it."""
    out = np.zeros(3 * max_items(batch, kv_heads) + batch + 1, dtype=np.int32)
    _fill(memoryview(out).cast("B").cast("i"), lengths, batch, kv_heads)
    return out


def _fill(words: memoryview, lengths: Sequence[int], batch: int, kv_heads: int) -> int:
    """Write the plan into ``words`` (int32, zero past what an earlier plan used); returns the pieces used.
    Plain Python: for a few dozen rows it is several times quicker than numpy's small-array calls."""
    items = max_items(batch, kv_heads)
    if len(lengths) > batch:
        raise ValueError(f"{len(lengths)} lengths for a batch of {batch}")
    blocks = [-(-n // BLOCK_N) for n in lengths]
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


class SplitPlan:
    """One batch size's plan on the device (``plan``, ``[3 * items + batch + 1]`` int32, at a fixed address for
    the graph that reads it) and the host buffers that upload it.

    :meth:`update` plans for the given lengths and uploads the plan in stream order: on CUDA through one of
    ``STAGING`` pinned buffers, each reused once its last upload has completed (so a plan made while
    earlier steps are still queued does not overwrite what they upload).
    """

    def __init__(self, batch: int, kv_heads: int, device: torch.device | str) -> None:
        self.batch, self.kv_heads = batch, kv_heads
        self.items = max_items(batch, kv_heads)
        device = torch.device(device)
        size = 3 * self.items + batch + 1
        self.plan = torch.zeros(size, dtype=torch.int32, device=device)
        cuda = device.type == "cuda"
        self._staging = torch.zeros((STAGING, size), dtype=torch.int32, pin_memory=cuda)
        self._words = [memoryview(self._staging[i].numpy()).cast("B").cast("i") for i in range(STAGING)]
        self._zeros = memoryview(np.zeros(size, dtype=np.int32)).cast("B").cast("i")
        self._used = [0] * STAGING  # pieces each staging buffer's plan holds
        self._events: list[torch.cuda.Event | None] = [None] * STAGING
        self._turn = 0
        self._driver = DriverCalls(device) if cuda else None
        self.lengths: list[int] | None = None  # what the plan on the device was made for (rounded)
        self.uploads = 0

    @property
    def last(self) -> np.ndarray | None:
        """The plan on the device, as the host made it (``None`` before the first)."""
        return None if self.lengths is None else self._staging[(self._turn - 1) % STAGING].numpy().copy()

    def update(self, lengths: Sequence[int]) -> None:
        """Plan for ``lengths`` (one per real batch row), rounded up to ``GRAIN``, and upload it before the
        work queued next; nothing to do when that is the plan made last."""
        lengths = [-(-n // GRAIN) * GRAIN for n in lengths]
        if lengths == self.lengths:
            return
        slot = self._turn
        event = self._events[slot]
        if event is not None:
            event.synchronize()  # normally long done: STAGING - 1 uploads went after it
        words, used = self._words[slot], self._used[slot]
        words[: 3 * used] = self._zeros[: 3 * used]  # the pieces an older plan left here
        self._used[slot] = _fill(words, lengths, self.batch, self.kv_heads)
        if self._driver is None:
            self.plan.copy_(self._staging[slot])
        else:
            self._driver.upload(self.plan, self._staging[slot])
            if event is None:
                self._events[slot] = torch.cuda.Event()
                self._events[slot].record()  # torch's first record creates the event
            else:
                self._driver.record(event)
        self._turn = (slot + 1) % STAGING
        self.lengths = lengths
        self.uploads += 1
