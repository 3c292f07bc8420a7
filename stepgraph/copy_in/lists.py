"""List sources of a copy-in: a plain list of Python ints for a 1-D integer or bool buffer (a slot list, the
batch's tokens), packed with ``struct`` as the buffer's dtype straight into the staging ring's pinned
memory, so that a serving loop makes no tensor for it. Packing is exact and refuses what does not fit
(floats, strings, ints out of the dtype's range), naming the input.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence

import torch

# the struct code of each dtype a list source may fill (integers and bool: packing is exact, as in torch.tensor)
LIST_CODES = {
    torch.int64: "q", torch.int32: "i", torch.int16: "h", torch.int8: "b", torch.uint8: "B", torch.bool: "?",
}  # fmt: skip
LIST_DTYPES = frozenset(LIST_CODES)  # the dtypes of 1-D destinations a list of Python ints may fill


@functools.cache
def _list_struct(count: int, code: str) -> struct.Struct:
    return struct.Struct(f"<{count}{code}")


def pack_list(key: object, values: Sequence, count: int, code: str, raw: memoryview | bytearray, offset: int) -> None:
    """The first ``count`` of ``values`` into ``raw`` at ``offset``, as the buffer's dtype (``code``)."""
    try:
        _list_struct(count, code).pack_into(raw, offset, *(values if len(values) == count else values[:count]))
    except (struct.error, OverflowError, TypeError) as e:
        raise ValueError(f"input {key!r}: {e} (a list input holds Python ints that fit its buffer's dtype)") from None


def list_tensor(key: object, values: Sequence, code: str, dtype: torch.dtype) -> torch.Tensor:
    """A list source as a host tensor of ``dtype`` (where the ring does not carry it), packed as the ring
    would pack it (so the same lists are refused either way)."""
    data = bytearray(_list_struct(len(values), code).size)
    pack_list(key, values, len(values), code, data, 0)
    return torch.frombuffer(data, dtype=dtype) if data else torch.empty(0, dtype=dtype)
