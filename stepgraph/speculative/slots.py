"""Relay slots and cache rows: which request holds which, and handing them back.

Cache rows (and, with pages, the positions behind them) come from the decoder's KV cache
(:mod:`stepgraph.kv`): a request is admitted with room for its prompt and first step, and a row's
pages go back with it.

Slot 0 is handed out last: a batch of one reads and writes it through views (no gather, no store), so a
lone request is moved there once. A slot is cleared (pad values, scratch cache row) when it comes back;
clears are stream-ordered after every step already launched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable

import torch

from stepgraph.kv import KVCache
from stepgraph.speculative.relay import RelayState
from stepgraph.speculative.requests import Request


class SlotAllocator:
    """The free relay slots (``max_requests + 1``) and the cache rows (from ``kv``) of a decoder.

    ``margin``: positions a request holds beyond its tokens (a step's writes, one step ahead).
    """

    def __init__(self, max_requests: int, relay: RelayState, kv: KVCache, margin: int) -> None:
        self.max_requests, self.relay, self.kv, self.margin = max_requests, relay, kv, margin
        self._free_slots = list(range(1, max_requests + 1)) + [0]

    @property
    def in_use(self) -> tuple[int, int]:
        """``(slots, cache rows)`` held by requests."""
        return self.max_requests + 1 - len(self._free_slots), self.kv.num_rows - self.kv.free_rows()

    def free(self) -> int:
        """How many more requests can be given a slot and a cache row (pages aside)."""
        return min(len(self._free_slots), self.kv.free_rows())

    def positions(self, r: Request) -> int:
        """The positions ``r`` needs held before its next step: its tokens and the margin."""
        return min(len(r.prompt) + max(len(r.output), 1) + self.margin, self.worst(r))

    def worst(self, r: Request) -> int:
        """The positions ``r`` may come to hold: its prompt, ``max_new_tokens`` and the margin."""
        return len(r.prompt) + r.max_new_tokens + self.margin

    def can_take(self, r: Request) -> bool:
        """Whether ``r`` can be admitted now (a free slot, a cache row and room for its prompt)."""
        return bool(self._free_slots) and self.kv.can_admit(self.positions(r), self.worst(r))

    def take(self, r: Request) -> None:
        """Give ``r`` a slot and a cache row with room for its prompt (refused, taking nothing, when
        there is none)."""
        if not self._free_slots:
            raise ValueError(f"no relay slot is free: all {self.max_requests} are held by requests")
        r.cache_row = self.kv.admit(self.positions(r), self.worst(r))
        r.room = self.kv.room(r.cache_row)
        r.slot = self._free_slots.pop(0)

    def grow(self, batch: list[Request]) -> list[Request]:
        """Room for the next step of each request of ``batch``; returns those that got it (the others sit
        this step out, keeping what they hold). Only requests about to outgrow their room ask the cache."""
        if not self.kv.grows:
            return batch
        m = self.margin
        asks = [r for r in batch if len(r.prompt) + max(len(r.output), 1) + m > r.room]  # a first token may be pending
        if not asks:
            return batch
        granted = self.kv.reserve([(r.cache_row, self.positions(r)) for r in asks])
        denied = set()
        for r, ok in zip(asks, granted):
            if ok:
                r.room = self.kv.room(r.cache_row)
            else:
                denied.add(r.id)
        return [r for r in batch if r.id not in denied] if denied else batch

    def give_back(self, r: Request) -> None:
        """Take back whatever ``r`` holds (slot cleared); ``r`` then holds nothing."""
        if r.slot >= 0:
            self._retire_slot(r.slot)
        if r.cache_row >= 0:
            self.kv.release(r.cache_row)
        r.slot = r.cache_row = -1
        r.room = 0

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
