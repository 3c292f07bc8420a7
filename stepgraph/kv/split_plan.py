"""One key's split plan on the device, and its uploads (the planned schedule of
:class:`~stepgraph.kv.PagedKV`; the plan itself: :mod:`stepgraph.kernels.split_plan`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from stepgraph.copy_in.driver import DriverCalls
from stepgraph.kernels.decode_attention import BLOCK_N
from stepgraph.kernels.split_plan import fill_plan, max_items

STAGING = 4  # host buffers per plan in rotation: a buffer is rewritten once the upload that read it is done
# Lengths are planned rounded up to GRAIN positions: the kernel skips the blocks past each request's last
# position at the cost of a comparison, and a plan then changes every GRAIN positions a request grows by,
# not every page.
GRAIN = 4 * BLOCK_N


class SplitPlan:
    """One batch size's plan on the device (``plan``, ``[3 * items + batch + 1]`` int32, at a fixed address for
    the graph that reads it) and the host buffers that upload it. ``max_len``: the positions a row holds
    at most (no more pieces than its blocks).

    :meth:`update` plans for the given lengths and uploads the plan in stream order: on CUDA through one of
    ``STAGING`` pinned buffers, each reused once its last upload has completed (so a plan made while
    earlier steps are still queued does not overwrite what they upload).
    """

    def __init__(self, batch: int, kv_heads: int, device: torch.device | str, max_len: int | None = None) -> None:
        self.batch, self.kv_heads, self.max_len = batch, kv_heads, max_len
        self.items = max_items(batch, kv_heads, max_len)
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
        self._used[slot] = fill_plan(words, lengths, self.batch, self.kv_heads, self.max_len)
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
