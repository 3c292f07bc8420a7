"""The KV seam: what the step, the decoder and the models ask of a KV cache.

A request holds a *cache row*: an integer the models index their cache with. What stands behind it is
the cache's business:

* :class:`RowKV` — one row of ``max_seq_len`` positions per request (the layout of the example model
  and the Hugging Face adapter until now); every request reserves the whole row.
* :class:`PagedKV` — pages of ``page_size`` positions from a shared pool, named per request by a block
  table on the device; a request holds only the pages its tokens need, handed out as it grows.

Both answer the same calls. On the host, between steps (:class:`~stepgraph.speculative.slots.SlotAllocator`
and the scheduler): ``admit`` / ``can_admit`` (a row and the positions of a prompt), ``reserve`` (the
positions the next step writes, for a batch), ``release``, ``check_fits`` (refuse at admission what could
never fit). In the step graph: ``buffers`` (static inputs the runner's copy-in fills, in the step's one
copy launch) and ``apply`` (make the device metadata current, first thing in the step). In the models:
``layer_cache``, ``write``, ``gather`` (for SDPA) and ``attend`` (in place, by the Triton kernel of
:mod:`stepgraph.kernels.decode_attention`).
"""

import torch

from stepgraph.kv.paged import PagedKV
from stepgraph.kv.rows import RowKV
from stepgraph.kv.seam import KVCache

__all__ = ["KVCache", "PagedKV", "RowKV", "make_kv"]


def make_kv(
    kind: str,
    num_rows: int,
    max_seq_len: int,
    device: torch.device | str = "cpu",
    *,
    page_size: int = 16,
    num_pages: int | None = None,
    schedule: str = "fixed",
) -> KVCache:
    """``kind="rows"``: a :class:`RowKV` of ``num_rows`` rows of ``max_seq_len`` positions; ``"paged"``: a
    :class:`PagedKV` for as many requests, ``num_pages`` pages of ``page_size`` positions, its attention
    on the ``schedule`` given (``"fixed"`` or ``"planned"``, see :class:`PagedKV`)."""
    if kind == "paged":
        return PagedKV(num_rows, max_seq_len, device, page_size=page_size, num_pages=num_pages, schedule=schedule)
    if schedule != "fixed":
        raise ValueError(f"schedule={schedule!r} is for kv='paged'; a row cache takes the fixed schedule")
    if kind == "rows":
        return RowKV(num_rows, max_seq_len, device)
    raise ValueError(f"kv={kind!r}: use 'rows' or 'paged'")
