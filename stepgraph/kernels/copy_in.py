"""The copy-in kernel and its table layout (:mod:`stepgraph.copy_in` holds the plan that fills the
table).

One program per (destination, row): row ``r`` of a destination is a copy of its source row when
``r < n``, its pad pattern when ``n <= r < padded``; words of 8, 4, 2 or 1 bytes as the addresses allow.
A destination takes part in a call when its entry's mark names the header's generation, in one of three
forms: the generation (its source given by the entry's per-call columns: address, stride, flags), minus it
(its rows in the staging buffer: the entry's fixed host columns), or the generation plus ``DENSE`` (a
source whose rows are ``row_bytes`` apart and aligned as the destination: only its address is per call).
So a host source costs its call one word and such a device source two, whatever the entry held before.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl

from .row_copy import _word_ptr

BLOCK = 256  # words per iteration of a row
# table layout (int64 words): a header, then one entry per destination
HEADER = 8  # n, padded, generation
COLS = 10
# the columns a call writes come first (one struct write; for a host source only the mark; for a dense one the
# mark and SRC), then those fixed at declaration (HOST_SRC: where the staging buffer holding the entry keeps
# the destination's host rows; DENSE_FLAGS: the flags of rows row_bytes apart, aligned as the destination)
ACTIVE, SRC, SRC_STRIDE, FLAGS, DST, ROW_BYTES, DST_STRIDE, FILL, HOST_SRC, DENSE_FLAGS = range(COLS)
WORD_MASK, HAS_FILL = 15, 16  # FLAGS: word bytes | has-fill bit
DENSE = 1 << 48  # added to the generation in a dense source's mark (generations stay far below it)
# the same layout for the kernel (Triton reads globals only as constexpr)
_HEADER, _COLS, _HAS_FILL, _WORD_MASK = (
    tl.constexpr(HEADER),
    tl.constexpr(COLS),
    tl.constexpr(HAS_FILL),
    tl.constexpr(WORD_MASK),
)
_ACTIVE, _SRC, _DST, _ROW_BYTES = tl.constexpr(ACTIVE), tl.constexpr(SRC), tl.constexpr(DST), tl.constexpr(ROW_BYTES)
_SRC_STRIDE, _DST_STRIDE, _FILL, _FLAGS = (tl.constexpr(c) for c in (SRC_STRIDE, DST_STRIDE, FILL, FLAGS))
_HOST_SRC, _DENSE_FLAGS, _DENSE = tl.constexpr(HOST_SRC), tl.constexpr(DENSE_FLAGS), tl.constexpr(DENSE)


@triton.jit
def _copy_row(src_addr, dst_addr, r, copy, row_bytes, src_stride, dst_stride, fill,
              WORD: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    """Row ``r``: ``dst = src`` when ``copy``, else the fill pattern, in words of ``WORD`` bytes."""
    row_words = row_bytes // WORD
    src = _word_ptr(src_addr, WORD) + r * (src_stride // WORD)
    dst = _word_ptr(dst_addr, WORD) + r * (dst_stride // WORD)
    limit = tl.where(copy, row_words, 0)
    for start in range(0, row_words, BLOCK):
        offs = start + tl.arange(0, BLOCK).to(tl.int64)
        vals = tl.load(src + offs, mask=offs < limit, other=0)
        if WORD == 8:
            fill_word = fill.to(vals.dtype, bitcast=True)
        else:
            shift = ((offs * WORD) % 8) * 8
            fill_word = ((fill >> shift) & ((1 << (8 * WORD)) - 1)).to(vals.dtype)
        tl.store(dst + offs, tl.where(copy, vals, fill_word), mask=offs < row_words)


@triton.jit
def copy_in_kernel(table_addr, BLOCK: tl.constexpr):
    """Program (field ``f``, row ``r``) of a copy-in described by the table at ``table_addr``. Header:
    ``n``, ``padded``, ``generation`` (> 0); a field takes part when its entry's mark is the generation
    (source: the per-call columns), minus it (source: the host rows in the staging buffer) or it plus
    ``DENSE`` (source: the per-call address, rows ``row_bytes`` apart, the fixed flags), so fields not
    given keep their rows and nothing is reset per call."""
    f = tl.program_id(0)
    r = tl.program_id(1).to(tl.int64)
    head = table_addr.to(tl.pointer_type(tl.int64))
    if r < tl.load(head + 1):
        entry = head + _HEADER + f * _COLS
        mark, generation = tl.load(entry + _ACTIVE), tl.load(head + 2)
        host = mark == -generation
        dense = host | (mark == generation + _DENSE)  # rows row_bytes apart, the fixed flags
        if (mark == generation) | dense:
            copy = r < tl.load(head)
            flags = tl.load(entry + tl.where(dense, _DENSE_FLAGS, _FLAGS))
            if copy | ((flags & _HAS_FILL) != 0):
                word = flags & _WORD_MASK
                src = tl.load(entry + tl.where(host, _HOST_SRC, _SRC))
                dst = tl.load(entry + _DST)
                row_bytes = tl.load(entry + _ROW_BYTES)
                src_stride = tl.where(dense, row_bytes, tl.load(entry + _SRC_STRIDE))
                dst_stride = tl.load(entry + _DST_STRIDE)
                fill = tl.load(entry + _FILL)
                if word == 8:
                    _copy_row(src, dst, r, copy, row_bytes, src_stride, dst_stride, fill, 8, BLOCK)
                elif word == 4:
                    _copy_row(src, dst, r, copy, row_bytes, src_stride, dst_stride, fill, 4, BLOCK)
                elif word == 2:
                    _copy_row(src, dst, r, copy, row_bytes, src_stride, dst_stride, fill, 2, BLOCK)
                else:
                    _copy_row(src, dst, r, copy, row_bytes, src_stride, dst_stride, fill, 1, BLOCK)


@triton.jit
def fetch_table_kernel(ring_addr, slot_bytes, counter_addr, device_addr, words, RING: tl.constexpr,
                        WORDS: tl.constexpr):  # fmt: skip
    """One program: the table of the ring buffer this copy is for, ``words`` int64 words from pinned host
    memory into device memory (a kernel node where a graph would otherwise hold a memcpy node).

    The buffer is ``counter % RING``, the counter (int64, device memory) counting the copies fetched so
    far in stream order; the host counts the copies it launched the same way, so one captured launch
    serves every buffer of the ring, on its own or inside a key's graph."""
    counter = counter_addr.to(tl.pointer_type(tl.int64))
    turn = tl.load(counter)
    src = (ring_addr + (turn % RING) * slot_bytes).to(tl.pointer_type(tl.int64))
    dst = device_addr.to(tl.pointer_type(tl.int64))
    i = tl.arange(0, WORDS)
    tl.store(dst + i, tl.load(src + i, mask=i < words), mask=i < words)
    tl.store(counter, turn + 1)


def widest_word(*values: int) -> int:
    """The largest of 8, 4, 2, 1 that divides every value (addresses, strides, sizes in bytes)."""
    w = 8
    for v in values:
        low = v & -v
        if low and low < w:
            w = low
    return w


def input_copy_ref(
    srcs: Sequence[torch.Tensor], dsts: Sequence[torch.Tensor], num_rows: int, padded_rows: int, pads: Sequence
) -> None:
    """Reference of a copy-in: one ``copy_`` and one ``fill_`` per tensor (``pads[i] = None`` leaves padded
    rows alone). Host sources are read before it returns, as the kernel's staging copy reads them.

    Cost: reads ``num_rows`` rows and writes ``padded_rows`` rows of each tensor; 2 launches per tensor.
    """
    for src, dst, pad in zip(srcs, dsts, pads, strict=True):
        # a host source is read before the call returns (its owner may change it right after, as with the
        # kernel, which reads host rows from its own staging copy); device sources are stream-ordered
        dst[:num_rows].copy_(src[:num_rows], non_blocking=not src.is_cpu)
        if pad is not None and padded_rows > num_rows:
            dst[num_rows:padded_rows].fill_(pad)
