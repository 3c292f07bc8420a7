"""Relay state: per-request slots that one step writes and the next step reads, on the device.

Because the next step reads its inputs from here, the host can launch step N+1 before it has read step
N's tokens. Slot ``num_slots`` is a scratch slot (the unfused store path sends padded rows there; the
gather gives padded rows the pad values instead). With ``fused_relay`` a batch of one reads and writes
slot 0 through views: no gather and no store launches at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from stepgraph.config import Toggles
from stepgraph.kernels.relay import RelayGather, RelayStore
from stepgraph.sampling import REQUEST_FIELDS

#: Fields written by a step (the next step's inputs that depend on this step).
STEP_WRITES = ("token", "draft", "seq_len", "hidden", "offset")


class RelayState:
    """Per-request slots, their gathered per-step copies, and the step's output destinations.

    Fields (``S = num_slots + 1`` rows): ``token`` (last emitted token, not yet seen by the target),
    ``draft`` (first draft token of the next step), ``seq_len`` (the target's cache length; ``token``
    sits at this position), ``cache_row``, ``hidden`` (the draft feature for ``token``'s position), the
    request's sampling state (:data:`stepgraph.sampling.REQUEST_FIELDS`: temperature, top-k, top-p, min-p,
    seed) and ``offset`` (its random stream position).
    """

    def __init__(
        self,
        num_slots: int,
        max_batch: int,
        hidden_size: int,
        hidden_dtype: torch.dtype,
        device: torch.device,
        scratch_cache_row: int,
        toggles: Toggles,
    ) -> None:
        S = num_slots + 1
        self.num_slots, self.scratch_slot = num_slots, num_slots
        spec = {
            "token": ((), torch.int64, 0),
            "draft": ((), torch.int64, 0),
            "seq_len": ((), torch.int64, 0),
            "cache_row": ((), torch.int64, scratch_cache_row),
            "hidden": ((hidden_size,), hidden_dtype, 0),
            **{name: ((), dtype, pad) for name, (dtype, pad) in REQUEST_FIELDS.items()},  # the sampling state
            "offset": ((), torch.int64, 0),
        }
        self.pads = {name: pad for name, (_, _, pad) in spec.items()}
        self.fields = {n: torch.full((S, *row), pad, dtype=dt, device=device) for n, (row, dt, pad) in spec.items()}
        self.work = {
            n: torch.full((max_batch, *row), pad, dtype=dt, device=device) for n, (row, dt, pad) in spec.items()
        }
        # what a step writes for the next one: bonus token, next first draft, new length, draft feature
        self.out = {n: torch.zeros_like(self.work[n]) for n in ("token", "draft", "seq_len", "hidden")}
        names = list(spec)
        self._gather = RelayGather(
            [self.fields[n] for n in names],
            [self.work[n] for n in names],
            [self.pads[n] for n in names],
            fused=toggles.fused_relay,
        )
        dst = [self.fields[n] for n in STEP_WRITES]
        src = [self.out[n] for n in STEP_WRITES[:-1]] + [self.work["offset"]]
        self._store = RelayStore(dst, src, fused=toggles.fused_relay, scratch_row=self.scratch_slot)
        # clearing a slot: one store of rows that hold the pads, at that slot's index
        pad_rows = [torch.full((1, *row), pad, dtype=dt, device=device) for row, dt, pad in spec.values()]
        self._clear = RelayStore([self.fields[n] for n in names], pad_rows, fused=toggles.fused_relay)
        self._slot_index = torch.arange(S, dtype=torch.int64, device=device)  # slot s: [s : s + 1]
        self.single_views = toggles.fused_relay
        #: the requests' penalty state (:class:`~stepgraph.speculative.penalties.PenaltyState`), per slot
        #: like the fields, when the step applies penalties (it moves with them)
        self.penalties = None

    # ---- inside the step (graph-safe) ---------------------------------------------------------
    def is_single(self, batch: int) -> bool:
        return self.single_views and batch == 1

    def inputs(self, slots: torch.Tensor, batch: int) -> dict[str, torch.Tensor]:
        """The step's per-request inputs ``[batch, ...]``: slot 0 views for a single request, else one gather."""
        if self.is_single(batch):
            return {n: f[0:1] for n, f in self.fields.items()}
        self._gather(slots[:batch])
        return {n: w[:batch] for n, w in self.work.items()}

    def outputs(self, batch: int) -> dict[str, torch.Tensor]:
        """Where the step writes what the next step reads: slot 0 views, or buffers stored by :meth:`commit`."""
        if self.is_single(batch):
            return {n: self.fields[n][0:1] for n in self.out}
        return {n: o[:batch] for n, o in self.out.items()}

    def commit(self, slots: torch.Tensor, batch: int) -> None:
        """Store the step's outputs into the requests' slots (one launch; nothing for a single request)."""
        if not self.is_single(batch):
            self._store(slots[:batch])

    # ---- host side, outside graphs -------------------------------------------------------------
    def write(self, slot: int, **values) -> None:
        """Set fields of one slot (admission). Unnamed fields keep their value. Numbers are filled in by a
        kernel argument and tensors copied on the device: no host round trip, so nothing waits for the
        steps already in flight."""
        self._check_slot(slot)
        for name, value in values.items():
            _set_row(self.fields[name][slot], value)

    def clear(self, slot: int) -> None:
        """Reset a slot to the pad values (a padded row's state: scratch cache row, length 0); stream-ordered
        after the steps already launched, without waiting for them."""
        self._check_slot(slot)
        if self._clear.fused:  # one launch
            self._clear(self._slot_index[slot : slot + 1])
        else:
            for name, f in self.fields.items():
                f[slot].fill_(self.pads[name])

    def move(self, src: int, dst: int) -> None:
        """Copy every field of slot ``src`` to ``dst`` (stream-ordered after steps already launched)."""
        self._check_slot(src)
        self._check_slot(dst)
        for f in self.fields.values():
            f[dst].copy_(f[src])
        if self.penalties is not None:
            self.penalties.move(src, dst)

    def read(self, slot: int) -> dict[str, torch.Tensor]:
        return {n: f[slot].clone() for n, f in self.fields.items()}

    @contextlib.contextmanager
    def parked(self) -> Iterator[None]:
        """Park slot 0 (the single-request view slot) at pad values while capturing: warm-up runs of the
        batch-of-one graph must not advance a live request's state or touch its cache row."""
        saved = self.read(0)
        self.clear(0)
        try:
            yield
        finally:
            for name, value in saved.items():
                self.fields[name][0].copy_(value)

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.num_slots:
            raise ValueError(f"slot {slot} outside [0, {self.num_slots})")


def _set_row(row: torch.Tensor, value) -> None:
    # ``row[...] = number`` would stage the number through a pageable host-to-device copy, which waits for
    # every step in flight; fill_ passes it as a kernel argument instead
    if isinstance(value, torch.Tensor):
        row.copy_(value, non_blocking=True)
    else:
        row.fill_(value)
