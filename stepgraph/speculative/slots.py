"""Relay slots and cache rows: which request holds which, and handing them back.

Slot 0 is handed out last: a batch of one reads and writes it through views (no gather, no store), so a
lone request is moved there once. A slot is cleared (pad values, scratch cache row) when it comes back;
clears are stream-ordered after every step already launched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable

import torch

from stepgraph.speculative.relay import RelayState
from stepgraph.speculative.requests import Request


class SlotAllocator:
    """The free relay slots (``max_requests + 1``) and cache rows (``max_requests``) of a decoder."""

    def __init__(self, max_requests: int, relay: RelayState) -> None:
        self.max_requests, self.relay = max_requests, relay
        self._free_slots = list(range(1, max_requests + 1)) + [0]
        self._free_rows = list(range(max_requests))

    @property
    def in_use(self) -> tuple[int, int]:
        """``(slots, cache rows)`` held by requests."""
        return self.max_requests + 1 - len(self._free_slots), self.max_requests - len(self._free_rows)

    def available(self) -> bool:
        return bool(self._free_slots and self._free_rows)

    def free(self) -> int:
        """How many more requests can be given a slot and a cache row."""
        return min(len(self._free_slots), len(self._free_rows))

    def take(self, r: Request) -> None:
        """Give ``r`` a slot and a cache row (refused, taking nothing, when none is free)."""
        if not self.available():
            raise ValueError(f"no relay slot or cache row is free: all {self.max_requests} are held by requests")
        r.slot, r.cache_row = self._free_slots.pop(0), self._free_rows.pop(0)

    def give_back(self, r: Request) -> None:
        """Take back whatever ``r`` holds (slot cleared); ``r`` then holds nothing."""
        if r.slot >= 0:
            self._retire_slot(r.slot)
        if r.cache_row >= 0:
            self._free_rows.append(r.cache_row)
            self._free_rows.sort()
        r.slot = r.cache_row = -1

    def give_back_all(self, requests: Iterable[Request], device: torch.device) -> None:
        """After a failure: wait for the steps in flight (none may still read a slot handed out again),
        then take back everything ``requests`` hold."""
        if device.type == "cuda":
            with contextlib.suppress(Exception):  # a broken CUDA context: the original error says why
                torch.cuda.synchronize(device)
        for r in requests:
            self.give_back(r)

    def move_to_slot0(self, r: Request, drain: Callable[[], None] | None = None) -> None:
        """Move a lone request's state to slot 0 (the view slot). ``drain`` frees slot 0 first when it is
        still held by a finished request whose last step has not completed (the overlapped loop)."""
        if 0 not in self._free_slots and drain is not None:
            drain()
        if 0 not in self._free_slots:
            raise RuntimeError("slot 0 is held by a live request while another request runs alone")
        self._free_slots.remove(0)
        self.relay.move(r.slot, 0)
        old, r.slot = r.slot, 0
        self._retire_slot(old)

    def _retire_slot(self, slot: int) -> None:
        self.relay.clear(slot)
        self._free_slots.append(slot)
        self._free_slots.sort(key=lambda s: (s == 0, s))
