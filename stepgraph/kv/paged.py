"""The paged layout: pages of ``page_size`` positions from one pool, a block table per request.

Row ``r`` of the block table (``[num_rows + 1, max_pages + 1]`` int32, on the device) names the pages that
hold request ``r``'s positions: entry ``j`` holds positions ``j * page_size ..``. Entries not handed out,
and the whole scratch row, name the scratch page (``num_pages``), which padded batch rows write. The last
column is a trash column that no position reaches: masked-off updates land there.

**Host side.** A request is admitted with the pages of its prompt and first step, then ``reserve`` hands
out pages as it grows (the positions the next step writes; the overlapped loop asks one step ahead).
Admission and growth keep the pool *safe* (the banker's rule): in some order every request can run to
its worst case (prompt + ``max_new_tokens`` + the draft margin) with the pages the ones before it give
back. A grant that would leave the pool unsafe is withheld and the request sits a step out; a request
that cannot get its prompt's pages waits in the queue. Nothing is evicted and nothing deadlocks: in a
safe pool the request first in that order can always grow.

**On the device.** The table row of a newly admitted request is uploaded at admission (stream-ordered, it
waits for nothing). Pages handed out while serving travel with the step's inputs: the static buffer
``kv_pages [max_batch, W]`` (``(j << 32) | page`` per new entry, -1 for none) is filled by the runner's
copy-in in the step's one launch, and :meth:`PagedKV.apply`, the step's first stage, writes them into the
table. A buffer left in place is applied again by the next replay, to the rows of that step's batch: it is
left only while the batch holds the same requests in the same places (the same rows, none admitted again
since), whose entries are still the table's.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence

import torch

from stepgraph.buffers import Buffer
from stepgraph.kernels.decode_attention import gather_pages, paged_attention, planned_paged_attention
from stepgraph.kv.seam import scatter_kv
from stepgraph.kv.split_plan import SplitPlan

NO_UPDATE = -1


class PagedKV:
    """A paged KV cache for ``num_rows`` requests at once, ``num_pages`` pages of ``page_size`` positions.

    Parameters
    ----------
    num_rows:
        Requests held at once (block-table rows; the scratch row is ``num_rows``).
    max_seq_len:
        Positions per request at most (the table's width is ``ceil(max_seq_len / page_size)`` pages).
    device:
        Where the block table and the layers' pages live.
    page_size:
        Positions per page (default 16).
    num_pages:
        Pages in the pool (default: ``num_rows * max_pages``, the memory of a row per request).
    schedule:
        How :meth:`attend` splits the work inside a step: ``"fixed"`` (pieces of the whole
        ``max_seq_len``, chosen by the batch size) or ``"planned"`` (planned on the host before each
        replay from the batch's lengths, one plan per key, through the runner's ``before_replay`` hook:
        :mod:`stepgraph.kernels.split_plan`). Forwards outside a step always take the fixed one.

    Notes
    -----
    Model-side tensors: ``[num_pages + 1, 2, KVH, page_size, hd]`` per layer (the last page is scratch).
    """

    kind = "paged"
    grows = True

    def __init__(
        self,
        num_rows: int,
        max_seq_len: int,
        device: torch.device | str = "cpu",
        *,
        page_size: int = 16,
        num_pages: int | None = None,
        schedule: str = "fixed",
    ) -> None:
        if schedule not in ("fixed", "planned"):
            raise ValueError(f"schedule must be 'fixed' or 'planned', got {schedule!r}")
        if num_rows < 1 or max_seq_len < 1 or page_size < 1:
            raise ValueError(
                f"PagedKV needs num_rows, max_seq_len and page_size >= 1, got {num_rows}, {max_seq_len}, {page_size}"
            )
        self.num_rows, self.max_seq_len, self.page_size = num_rows, max_seq_len, page_size
        self.device = torch.device(device)
        self.max_pages = math.ceil(max_seq_len / page_size)
        self.num_pages = num_rows * self.max_pages if num_pages is None else int(num_pages)
        if self.num_pages < 1:
            raise ValueError(f"num_pages must be >= 1, got {num_pages}")
        self.scratch_row, self.scratch_page, self.trash_col = num_rows, self.num_pages, self.max_pages
        self.row_len = self.max_pages * page_size  # positions a gathered row spans
        shape = (num_rows + 1, self.max_pages + 1)
        # pinned on CUDA, so that a row's upload is stream-ordered and waits for nothing (from pageable
        # memory it would wait for every step in flight). An upload reads the row when it runs: what the
        # host wrote since (pages handed out later, which also travel in kv_pages) is at least as current.
        pinned = self.device.type == "cuda"
        self._host_table = torch.full(shape, self.scratch_page, dtype=torch.int32, pin_memory=pinned)
        self.table = self._host_table.to(self.device, copy=True)  # [rows + 1, max_pages + 1] int32, its own
        self._free_rows = list(range(num_rows))
        self._free_pages = list(range(self.num_pages - 1, -1, -1))  # a stack: page 0 handed out first
        self._held: dict[int, list[int]] = {}  # row -> its pages, in position order
        self._worst: dict[int, int] = {}  # row -> pages it may come to hold
        self._owed = 0  # sum over rows of worst - held: what the pool may still be asked for
        self._pending: dict[int, list[int]] = {}  # row -> entries handed out, not yet in a step's inputs
        self._admissions = 0
        self._tenure: dict[int, int] = {}  # row -> the admission that gave it to its request
        self._in_buffer: tuple[tuple[int, int], ...] | None = None  # (row, tenure) of the kv_pages built last
        self.schedule = schedule
        self._kv_heads: int | None = None  # the fewest KV heads of a layer made here (sizes the plans)
        self._step_rows: list[int] = []  # the rows of the step being launched (from step_inputs)
        self._hooked: SplitPlan | None = None  # the plan the last hook made current
        self._active: SplitPlan | None = None  # the plan attend() follows, inside a step only

    def pages_for(self, tokens: int) -> int:
        return -(-tokens // self.page_size)

    # ---- host side: admission, growth, release -------------------------------------------------------
    def check_fits(self, tokens: int) -> None:
        """Refuse a request whose worst case (``tokens`` positions) exceeds the whole pool."""
        if self.pages_for(tokens) > self.num_pages:
            raise ValueError(
                f"a request of up to {tokens} positions needs {self.pages_for(tokens)} pages of {self.page_size}, "
                f"but the pool holds {self.num_pages}; lower max_new_tokens or the prompt, or build the cache "
                "with more num_pages"
            )

    def can_admit(self, reserve: int, worst: int) -> bool:
        """Whether a request can be admitted now with ``reserve`` positions, ``worst`` at most: a free row,
        a safe pool after it, and its pages leave one free for each request already held that may still
        grow (admitting it does not make those sit their next step out)."""
        n, free = self.pages_for(reserve), len(self._free_pages)
        if not self._free_rows or n > free or n + self._growing() > free:
            return False
        w = self.pages_for(worst)
        return self._owed + w <= free or self._safe({None: (n, w)})  # every worst case fits: safe

    def _growing(self) -> int:
        return sum(1 for r, p in self._held.items() if len(p) < self._worst[r])

    def admit(self, reserve: int, worst: int) -> int:
        """A row for a new request, its first ``reserve`` positions' pages handed out and its table row
        uploaded (ValueError when :meth:`can_admit` says no; nothing is taken then)."""
        if not self.can_admit(reserve, worst):
            raise ValueError(
                f"no room for a request of {reserve} positions: {len(self._free_rows)} rows and "
                f"{len(self._free_pages)} of {self.num_pages} pages free; it waits until others finish"
            )
        row = self._free_rows.pop(0)
        self._admissions += 1
        self._tenure[row] = self._admissions
        self._held[row], self._worst[row] = [], self.pages_for(worst)
        self._owed += self._worst[row]
        self._hand_out(row, self.pages_for(reserve))
        self._pending.pop(row, None)  # uploaded with the whole row
        self.table[row].copy_(self._host_table[row], non_blocking=True)
        return row

    def reserve(self, wanted: Sequence[tuple[int, int]]) -> list[bool]:
        """Grow each ``(row, positions)`` to hold that many positions; returns which rows got them. A
        grant that would leave the pool unsafe (or that no free pages cover) is withheld: that request
        sits this step out. Rows asking least go first, as the safe order would take them."""
        ok = [True] * len(wanted)
        asks = []
        for i, (row, tokens) in enumerate(wanted):
            need = min(self.pages_for(tokens), self._worst[row]) - len(self._held[row])
            if need > 0:
                asks.append((self._worst[row] - len(self._held[row]), i, row, need))
        if not asks:
            return ok
        if self._grants_all_safe(asks):
            for _, _, row, need in asks:
                self._hand_out(row, need)
            return ok
        for _, i, row, need in sorted(asks):
            held = len(self._held[row])
            if need <= len(self._free_pages) and self._safe({row: (held + need, self._worst[row])}):
                self._hand_out(row, need)
            else:
                ok[i] = False
        return ok

    def _grants_all_safe(self, asks: list[tuple[int, int, int, int]]) -> bool:
        """Whether granting every ask at once leaves the pool safe (then so does granting any part of them):
        at once when every worst case fits, else by one check of the whole."""
        free = len(self._free_pages)
        if self._owed <= free:
            return True
        if sum(a[3] for a in asks) > free:
            return False
        return self._safe({row: (len(self._held[row]) + need, self._worst[row]) for _, _, row, need in asks})

    def release(self, row: int) -> None:
        """Give back ``row`` and its pages (after the last step that reads them has completed). The
        device's table row keeps naming them until the row's next admission rewrites it; no step
        reads it in between."""
        pages = self._held.pop(row)
        self._owed -= self._worst.pop(row) - len(pages)
        self._free_pages.extend(reversed(pages))
        self._host_table[row].fill_(self.scratch_page)
        self._pending.pop(row, None)
        self._free_rows.append(row)
        self._free_rows.sort()

    def room(self, row: int) -> int:
        """Positions ``row`` holds: its pages' worth."""
        return len(self._held[row]) * self.page_size

    def free_rows(self) -> int:
        return len(self._free_rows)

    def info(self) -> dict:
        return {
            "kind": self.kind,
            "rows": self.num_rows,
            "rows_held": self.num_rows - len(self._free_rows),
            "page_size": self.page_size,
            "pages": self.num_pages,
            "pages_held": self.num_pages - len(self._free_pages),
        }

    def _hand_out(self, row: int, n: int) -> None:
        held = self._held[row]
        start = len(held)
        new = [self._free_pages.pop() for _ in range(n)]
        held.extend(new)
        self._owed -= n
        self._host_table[row, start : start + n] = torch.tensor(new, dtype=torch.int32)
        self._pending.setdefault(row, []).extend(((start + k) << 32) | p for k, p in enumerate(new))

    def _safe(self, change: Mapping[int | None, tuple[int, int]]) -> bool:
        """Whether the pool stays safe with ``change`` applied (row -> (held, worst) pages; ``None``: a new
        request): sorted by what each may still ask, every one can finish with what the pool has free
        plus what those before it give back."""
        state = {r: (len(p), self._worst[r]) for r, p in self._held.items()}
        state.update(change)
        free = self.num_pages - sum(h for h, _ in state.values())
        if free < 0:
            return False
        for held, worst in sorted(state.values(), key=lambda hw: hw[1] - hw[0]):
            if worst - held > free:
                return False
            free += held
        return True

    # ---- the step's inputs and its first stage ------------------------------------------------------
    def buffers(self, max_batch: int, max_draft_len: int) -> dict[str, Buffer]:
        """``kv_pages [max_batch, W]``: the entries handed out since a request's last step (W covers a
        step's growth, ``2 * (K + 1)`` positions ahead; more travel as an upload of the row)."""
        width = self.pages_for(2 * (max_draft_len + 1)) + 1
        return {"kv_pages": Buffer((max_batch, width), torch.int64, pad=NO_UPDATE)}

    def step_inputs(self, rows: Sequence[int], batch_changed: bool, buffers: Mapping[str, Buffer]) -> dict | None:
        """The ``kv_pages`` input for a batch of ``rows`` (``buffers``: what :meth:`buffers` declared for this
        step): ``None`` when nothing is new and the batch holds the requests of the buffer built last, in
        the same places (that buffer is still right to apply again). ``batch_changed``: the caller knows the
        batch changed (a new buffer either way). A row handed to another request since, under the same
        relay slots, is a changed batch too: the last buffer's entries would land in the new request's row.
        A row with more new entries than the buffer holds is uploaded whole instead (stream-ordered after
        the steps in flight)."""
        self._step_rows = list(rows)
        batch = tuple((r, self._tenure.get(r, 0)) for r in rows)
        if not batch_changed and batch == self._in_buffer and not any(r in self._pending for r in rows):
            return None
        self._in_buffer = batch
        width = buffers["kv_pages"].shape[1]
        out = torch.full((len(rows), width), NO_UPDATE, dtype=torch.int64)
        for i, row in enumerate(rows):
            entries = self._pending.pop(row, None)
            if entries is None:
                continue
            if len(entries) > width:
                self.table[row].copy_(self._host_table[row], non_blocking=True)
            else:
                out[i, : len(entries)] = torch.tensor(entries, dtype=torch.int64)
        return {"kv_pages": out}

    def apply(self, buf: Mapping[str, torch.Tensor], rows: torch.Tensor) -> None:
        """In the step graph: the ``kv_pages`` entries into the block table rows ``rows [B]`` (masked-off
        entries into the scratch row's trash column)."""
        e = buf["kv_pages"]
        valid = e >= 0
        col = torch.where(valid, e >> 32, self.trash_col)
        page = torch.where(valid, e & 0xFFFFFFFF, self.scratch_page).to(torch.int32)
        row = torch.where(valid, rows[:, None], self.scratch_row)
        self.table[row, col] = page

    # ---- the planned schedule: a plan per key, made current by its hook -------------------------------
    def before_replay(self, key) -> object | None:
        """The runner's ``before_replay`` factory: for ``schedule="planned"``, ``key``'s plan and its hook
        ``hook(batch_size)``, which plans for the step's rows (their pages' worth of positions: what a
        step may read) and uploads the plan before the replay; ``None`` for the fixed schedule."""
        if self.schedule != "planned":
            return None
        if self._kv_heads is None:
            raise RuntimeError("schedule='planned' plans for the models' KV heads: make the models' layer caches first")
        plan = SplitPlan(key.batch_size, self._kv_heads, self.device, max_len=self.row_len)

        def hook(batch_size: int) -> None:
            rows = self._step_rows
            if len(rows) == batch_size:
                lengths = [self.room(r) if r in self._held else self.row_len for r in rows]
            else:  # a warm-up or a capture: nothing known, so every row may read all of it
                lengths = [self.row_len] * batch_size
            plan.update(lengths)
            self._hooked = plan

        hook.plan = plan  # for reports and tests
        return hook

    @contextlib.contextmanager
    def planning(self) -> Iterator[None]:
        """Inside a step (eager, its warm-up or its capture): :meth:`attend` follows the plan the key's
        hook made current. Outside, forwards (prefill) take the fixed schedule."""
        self._active = self._hooked
        try:
            yield
        finally:
            self._active = None

    # ---- the models ---------------------------------------------------------------------------------
    def layer_cache(self, kv_heads: int, head_dim: int, dtype: torch.dtype) -> torch.Tensor:
        self._kv_heads = kv_heads if self._kv_heads is None else min(self._kv_heads, kv_heads)
        shape = (self.num_pages + 1, 2, kv_heads, self.page_size, head_dim)
        return torch.zeros(shape, dtype=dtype, device=self.device)

    def locate(self, rows: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Where a forward's new keys and values go, ``(page, offset in the page)`` each ``[B, T]`` (the
        slot mapping: made once per forward, used by every layer's :meth:`write`)."""
        return self.table[rows[:, None], positions // self.page_size].long(), positions % self.page_size

    def write(self, cache: torch.Tensor, kv: torch.Tensor, where: tuple[torch.Tensor, torch.Tensor]) -> None:
        """kv ``[B, T, 2, KVH, hd]`` into one layer's pages at ``where`` (:meth:`locate`)."""
        scatter_kv(cache, kv, where)

    def gather(self, cache: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """The rows' pages laid out as rows ``[B, 2, KVH, max_pages * page_size, hd]`` (for SDPA)."""
        return gather_pages(cache, self.table[:, : self.max_pages], rows)

    def attend(self, q, cache, rows, positions, scale: float) -> torch.Tensor:
        """q ``[B, T, H, hd]`` over the rows' pages in place, up to each query's position."""
        table = self.table[:, : self.max_pages]
        plan = self._active
        if plan is not None and plan.batch == q.shape[0]:
            return planned_paged_attention(q, cache, table, rows, positions, scale, plan.plan, plan.items)
        return paged_attention(q, cache, table, rows, positions, scale)
