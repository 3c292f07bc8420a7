"""The row layout: one static row of ``max_seq_len`` positions per request, plus a scratch row."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from stepgraph.buffers import Buffer
from stepgraph.kernels.decode_attention import decode_attention
from stepgraph.kv.seam import scatter_kv


class RowKV:
    """``num_rows`` rows of ``max_seq_len`` positions (and the scratch row ``num_rows``).

    A request holds a whole row from admission to release, so ``reserve`` always succeeds and the step
    needs no metadata of its own. Model-side tensors: ``[num_rows + 1, 2, KVH, max_seq_len, hd]`` per layer.
    """

    kind = "rows"
    grows = False

    def __init__(self, num_rows: int, max_seq_len: int, device: torch.device | str = "cpu") -> None:
        if num_rows < 1 or max_seq_len < 1:
            raise ValueError(f"RowKV needs num_rows >= 1 and max_seq_len >= 1, got {num_rows}, {max_seq_len}")
        self.num_rows, self.max_seq_len, self.device = num_rows, max_seq_len, torch.device(device)
        self.scratch_row, self.row_len = num_rows, max_seq_len
        self._free = list(range(num_rows))

    # ---- host side ---------------------------------------------------------------------------------
    def check_fits(self, tokens: int) -> None:
        """Rows hold ``max_seq_len`` positions; the request rules check that bound already."""

    def can_admit(self, reserve: int, worst: int) -> bool:
        return bool(self._free)

    def admit(self, reserve: int, worst: int) -> int:
        if not self._free:
            raise ValueError(f"no cache row is free: all {self.num_rows} are held by requests")
        return self._free.pop(0)

    def reserve(self, wanted: Sequence[tuple[int, int]]) -> list[bool]:
        return [True] * len(wanted)

    def release(self, row: int) -> None:
        self._free.append(row)
        self._free.sort()

    def room(self, row: int) -> int:
        """Positions ``row`` holds: the whole row."""
        return self.max_seq_len

    def free_rows(self) -> int:
        return len(self._free)

    def step_inputs(self, rows: Sequence[int], batch_changed: bool, buffers: Mapping[str, Buffer]) -> dict | None:
        return None

    def info(self) -> dict:
        return {"kind": self.kind, "rows": self.num_rows, "rows_held": self.num_rows - len(self._free)}

    # ---- the step graph ----------------------------------------------------------------------------
    def buffers(self, max_batch: int, max_draft_len: int) -> dict[str, Buffer]:
        return {}

    def apply(self, buf: Mapping[str, torch.Tensor], rows: torch.Tensor) -> None:
        pass

    # ---- the models --------------------------------------------------------------------------------
    def layer_cache(self, kv_heads: int, head_dim: int, dtype: torch.dtype) -> torch.Tensor:
        shape = (self.num_rows + 1, 2, kv_heads, self.max_seq_len, head_dim)
        return torch.zeros(shape, dtype=dtype, device=self.device)

    def locate(self, rows: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Where a forward's new keys and values go, ``(row, position)`` each ``[B, T]`` (made once per
        forward, used by every layer's :meth:`write`)."""
        return rows[:, None].expand(positions.shape), positions

    def write(self, cache: torch.Tensor, kv: torch.Tensor, where: tuple[torch.Tensor, torch.Tensor]) -> None:
        """kv ``[B, T, 2, KVH, hd]`` into one layer's cache at ``where`` (:meth:`locate`)."""
        scatter_kv(cache, kv, where)

    def gather(self, cache: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """The rows ``[B]`` as ``[B, 2, KVH, max_seq_len, hd]``."""
        return cache[rows]

    def attend(self, q, cache, rows, positions, scale: float) -> torch.Tensor:
        """q ``[B, T, H, hd]`` over the rows in place, up to each query's position."""
        return decode_attention(q, cache, rows, positions, scale)
