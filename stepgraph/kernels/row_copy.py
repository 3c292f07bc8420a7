"""One kernel that copies rows of many tensors (mixed dtypes and row sizes) in a single launch.

A *table* (int64, one row per field) holds each field's source and destination address, its row size
and strides in words, a fill pattern for padded rows, and the number of rows on its indexed side:

    dst[r] = src[r]             (identity; rows >= n_copy get the fill)          input copy
    dst[r] = src[index[r]]      (gather;   index < 0 or out of range -> fill)     relay gather
    dst[index[r]] = src[r]      (scatter;  index < 0 or out of range -> skipped)  relay store

Data moves as words of ``WORD_BYTES`` (the largest of 8/4/2/1 that divides every address, stride and
row size in the table), so bytes are copied exactly whatever the dtype.
Cost: reads and writes each copied byte once; one launch for the whole table. :class:`StaticCopy` is the
identity copy of fixed tensors, its table uploaded once (so it can be captured).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ._common import check, jit_any_batch, next_pow2, use_triton

COLS = 8
SRC, DST, ROW_WORDS, SRC_STRIDE, DST_STRIDE, FILL, HAS_FILL, LIMIT = range(COLS)
MAX_BLOCK = 1024


@triton.jit
def _word_ptr(addr, WORD_BYTES: tl.constexpr):
    if WORD_BYTES == 8:
        p = addr.to(tl.pointer_type(tl.int64))
    elif WORD_BYTES == 4:
        p = addr.to(tl.pointer_type(tl.int32))
    elif WORD_BYTES == 2:
        p = addr.to(tl.pointer_type(tl.int16))
    else:
        p = addr.to(tl.pointer_type(tl.int8))
    return p


@jit_any_batch
def _row_copy_kernel(
    table_ptr,
    index_ptr,
    n_copy,
    WORD_BYTES: tl.constexpr,
    BLOCK: tl.constexpr,
    MODE: tl.constexpr,  # 0 identity, 1 gather (index on src), 2 scatter (index on dst)
):
    f = tl.program_id(0)
    r = tl.program_id(1).to(tl.int64)
    c = tl.program_id(2)
    entry = table_ptr + f * 8
    src_addr = tl.load(entry + 0)
    dst_addr = tl.load(entry + 1)
    row_words = tl.load(entry + 2)
    src_stride = tl.load(entry + 3)
    dst_stride = tl.load(entry + 4)
    fill = tl.load(entry + 5)
    has_fill = tl.load(entry + 6) != 0
    limit = tl.load(entry + 7)

    src_row = r
    dst_row = r
    copy = r < n_copy
    write = copy | has_fill
    if MODE == 1:
        src_row = tl.load(index_ptr + r).to(tl.int64)
        copy = copy & (src_row >= 0) & (src_row < limit)
        write = copy | has_fill
    if MODE == 2:
        dst_row = tl.load(index_ptr + r).to(tl.int64)
        write = copy & (dst_row >= 0) & (dst_row < limit)
        copy = write

    offs = c * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
    # masks as one compare against a per-row word limit (0 when the row is skipped): always boolean blocks
    src = _word_ptr(src_addr, WORD_BYTES) + src_row * src_stride + offs
    dst = _word_ptr(dst_addr, WORD_BYTES) + dst_row * dst_stride + offs
    vals = tl.load(src, mask=offs < tl.where(copy, row_words, 0), other=0)
    if WORD_BYTES == 8:
        fill_word = fill.to(vals.dtype, bitcast=True)
    else:
        shift = ((offs * WORD_BYTES) % 8) * 8
        fill_word = ((fill >> shift) & ((1 << (8 * WORD_BYTES)) - 1)).to(vals.dtype)
    out = tl.where(copy, vals, fill_word)
    tl.store(dst, out, mask=offs < tl.where(write, row_words, 0))


def fill_pattern(value: int | float | bool, dtype: torch.dtype) -> int:
    """The element's bytes for ``value`` repeated to 8 bytes, as a signed int64 (torch's own encoding)."""
    one = torch.full((1,), value, dtype=dtype).view(torch.uint8)
    reps = 8 // one.numel()
    return int(one.repeat(reps).view(torch.int64).item())


def row_bytes(t: torch.Tensor) -> int:
    return (t[0].numel() if t.dim() > 1 else 1) * t.element_size()


def rows_contiguous(t: torch.Tensor) -> bool:
    """Each row is one contiguous run of bytes (any row stride)."""
    return t.dim() >= 1 and t.element_size() <= 8 and (t.dim() == 1 or t[0].is_contiguous())


@dataclass
class Field:
    """One table row, before word size is known (addresses and strides in bytes)."""

    src_addr: int
    dst_addr: int
    row_bytes: int
    src_stride: int
    dst_stride: int
    fill: int | None
    limit: int


def field(src: torch.Tensor, dst: torch.Tensor, fill: int | float | bool | None, limit: int) -> Field:
    esize = dst.element_size()
    return Field(
        src_addr=src.data_ptr(),
        dst_addr=dst.data_ptr(),
        row_bytes=row_bytes(dst),
        src_stride=src.stride(0) * esize,
        dst_stride=dst.stride(0) * esize,
        fill=None if fill is None else fill_pattern(fill, dst.dtype),
        limit=limit,
    )


def word_bytes(fields: Sequence[Field]) -> int:
    w = 8
    for f in fields:
        for v in (f.src_addr, f.dst_addr, f.row_bytes, f.src_stride, f.dst_stride):
            while v % w:
                w //= 2
    return w


def table_rows(fields: Sequence[Field], w: int) -> list[list[int]]:
    return [
        [
            f.src_addr,
            f.dst_addr,
            f.row_bytes // w,
            f.src_stride // w,
            f.dst_stride // w,
            0 if f.fill is None else f.fill,
            0 if f.fill is None else 1,
            f.limit,
        ]
        for f in fields
    ]


def block_for(max_row_words: int) -> int:
    return min(MAX_BLOCK, next_pow2(max_row_words))


def launch(
    table: torch.Tensor,
    num_fields: int,
    num_rows: int,
    max_row_words: int,
    word: int,
    n_copy: int,
    *,
    index: torch.Tensor | None = None,
    mode: int = 0,
) -> None:
    """Launch the row-copy kernel over ``num_fields`` table rows and ``num_rows`` rows (grid F x R x C)."""
    if num_fields == 0 or num_rows == 0:
        return
    block = block_for(max_row_words)
    grid = (num_fields, num_rows, triton.cdiv(max_row_words, block))
    _row_copy_kernel[grid](table, table if index is None else index, n_copy, WORD_BYTES=word, BLOCK=block, MODE=mode)


class StaticCopy:
    """``dsts[i][:n] = srcs[i][:n]`` (pad rows ``[n, padded)``) for fixed tensors: the table is built and
    uploaded once, so the copy can be captured in a CUDA graph (one kernel node)."""

    def __init__(
        self, srcs: Sequence[torch.Tensor], dsts: Sequence[torch.Tensor], pads: Sequence | None = None
    ) -> None:
        pads = [None] * len(dsts) if pads is None else list(pads)
        check(len(srcs) == len(dsts) == len(pads) and len(dsts) > 0, "one source and one pad per destination")
        for s, d in zip(srcs, dsts, strict=True):
            check(
                s.dtype == d.dtype and s.shape[1:] == d.shape[1:],
                "sources and destinations must match in dtype and rows",
            )
            check(rows_contiguous(s) and rows_contiguous(d), "every row must be one contiguous run of bytes")
        check(use_triton(dsts[0]), "StaticCopy needs CUDA (or TRITON_INTERPRET=1 on the CPU)")
        fields = [field(s, d, p, d.shape[0]) for s, d, p in zip(srcs, dsts, pads, strict=True)]
        self.word = word_bytes(fields)
        self.max_words = max(f.row_bytes // self.word for f in fields)
        self.num_fields = len(fields)
        self.table = torch.tensor(table_rows(fields, self.word), dtype=torch.int64).to(dsts[0].device)

    def __call__(self, n: int, padded: int | None = None) -> None:
        launch(self.table, self.num_fields, n if padded is None else padded, self.max_words, self.word, n)
