"""The copy-in plan: a run's inputs (many tensors, mixed dtypes and sizes) into static buffers, in one launch.

``dst[:n] = src[:n]`` and ``dst[n:padded] = pad`` for every input, in **one** kernel launch
(:mod:`stepgraph.kernels.copy_in`), whose host cost does not grow with Python work per field:
:class:`InputCopyPlan` computes everything known at declaration once (destinations, strides, pad patterns,
word sizes, a captured launch), and a call only writes source addresses (and host rows) into pinned memory
that the kernel reads in place. Where the kernel cannot apply (a row that is not one contiguous run of
bytes, elements wider than 8 bytes, a device Triton does not run on) that input falls back to ``copy_`` +
``fill_`` with identical bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn

import torch

from stepgraph.kernels import row_copy as rc
from stepgraph.kernels import use_triton
from stepgraph.kernels.copy_in import (
    ACTIVE,
    COLS,
    DENSE,
    DENSE_FLAGS,
    DST,
    DST_STRIDE,
    FILL,
    FLAGS,
    HAS_FILL,
    HEADER,
    HOST_SRC,
    ROW_BYTES,
    SRC,
    SRC_STRIDE,
    WORD_MASK,
    input_copy_ref,
    widest_word,
)

from .address_space import ADDRESS_SPACE
from .lists import LIST_CODES, list_tensor, pack_list
from .ring import FusedLaunch, StagingRing

ALIGN = 16


def check(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


def input_copy(
    srcs: Sequence[torch.Tensor],
    dsts: Sequence[torch.Tensor],
    num_rows: int,
    padded_rows: int | None = None,
    pads: Sequence | None = None,
) -> None:
    """Copy ``srcs[i][:num_rows]`` into ``dsts[i]`` and fill ``dsts[i][num_rows:padded_rows]`` with ``pads[i]``.

    Shapes: ``srcs[i]`` is ``(>= num_rows, *row)``, ``dsts[i]`` is ``(>= padded_rows, *row)`` with the same
    row shape and dtype. ``pads[i] = None`` leaves padded rows alone. One launch (plus one host-to-device
    copy when some sources are on the host).

    CUDA graph: builds a plan on every call, so call it outside a capture; a :class:`InputCopyPlan` built
    once is what a runner uses.
    """
    padded_rows = num_rows if padded_rows is None else padded_rows
    pads = [None] * len(dsts) if pads is None else list(pads)
    plan = InputCopyPlan(dsts, pads)
    plan(list(range(len(dsts))), list(srcs), num_rows, padded_rows)


# writes the per-call columns of one table entry (generation, source address, source stride, flags); a host
# source's entry needs only its mark, minus the generation (its other columns are fixed: HOST_SRC,
# DENSE_FLAGS), and a dense device source's its mark, the generation plus DENSE, and its address
_ENTRY = struct.Struct("<qqqq")
_HEAD = struct.Struct("<qqq")  # the header: n, padded, generation
_LISTS = frozenset((list, tuple))  # the types of list sources
assert (ACTIVE, SRC, SRC_STRIDE, FLAGS) == (0, 1, 2, 3)


class _Destination:
    """What a call needs about one destination, computed once at declaration (read through slots: the hot
    path of every run with new inputs reads a few of these per source)."""

    __slots__ = (
        "index", "dtype", "dims", "width", "row_shape", "entry", "mark", "strides", "row_bytes", "element_size",
        "host_offset", "flags", "list_code",
    )  # fmt: skip

    def __init__(self, index: int, d: torch.Tensor, pad, host_offset: int, kernel_ok: bool) -> None:
        self.index = index
        self.dtype, self.dims, self.row_shape = d.dtype, d.dim(), d.shape[1:]  # the checks
        self.width = d.shape[1] if d.dim() > 1 else 0
        self.entry = (HEADER + COLS * index) * 8  # the entry's byte offset in a table
        self.mark = HEADER + COLS * index  # the word of its mark
        self.strides = _contiguous_strides(d.shape[1:]) if kernel_ok else None  # None: never the kernel
        self.row_bytes, self.element_size = rc.row_bytes(d), d.element_size()
        self.host_offset = host_offset  # where host rows go in a ring buffer
        # the widest word, and the fill bit: the entry's flags
        self.flags = widest_word(d.data_ptr(), d.stride(0) * d.element_size(), self.row_bytes)
        self.flags |= 0 if pad is None else HAS_FILL
        self.list_code = LIST_CODES.get(d.dtype) if d.dim() == 1 else None  # a list source's struct code


@dataclass(frozen=True)
class StagedCopy:
    """What a staged copy will do (:meth:`InputCopyPlan.staged`): its batch, and per destination index given,
    how its rows travel: ``"device"`` (the kernel reads the source where it is, address and stride written
    per call), ``"dense"`` (the same for rows ``row_bytes`` apart and aligned as the destination: only the
    address is written), ``"host"`` (the rows were copied into the staging ring, read there) or
    ``"fallback"`` (``copy_`` + ``fill_``)."""

    batch: int
    forms: dict[int, str]


class _Staged:
    """A copy :meth:`InputCopyPlan.stage` prepared and :meth:`InputCopyPlan.commit` launches."""

    __slots__ = ("slot", "generation", "batch", "direct", "fallback")

    def __init__(self, slot, generation, batch: int, direct: int, fallback: list) -> None:
        self.slot, self.generation, self.batch, self.direct, self.fallback = slot, generation, batch, direct, fallback


class InputCopyPlan:
    """Copy-in for a fixed set of destination buffers: everything known at declaration is computed once.

    ``plan(indices, srcs, n, padded)`` copies ``srcs[j][:n]`` into destination ``indices[j]`` and fills its
    rows ``[n, padded)`` with its pad, for every given source in **one** kernel launch. The same in two
    halves: :meth:`stage` checks ``{name or index: source}`` and writes each source's address and stride
    (and host rows) into the next buffer of a :class:`~.ring.StagingRing`, in one pass with one
    lookup per source, and returns the batch size; :meth:`commit` then sets the padded size and launches
    the copy (one graph launch on CUDA, which can carry a key's graph too: :meth:`fuser`). The kernel reads
    the rows of host sources in place from the ring (pinned on CUDA); their table entries are fixed per
    ring buffer, so a call writes only their mark. Where the kernel cannot apply (a row that is not one
    contiguous run of bytes, elements wider than 8 bytes, a device Triton does not run on) that source
    falls back to ``copy_`` + ``fill_`` with identical bytes.

    ``names``: the destinations' names, accepted by :meth:`stage` beside their indices. ``explain(key,
    src)``: raises the error for a source that does not fit its destination (unknown key, not a tensor,
    dtype, shape). ``staged``: host sources travel through the ring (default on CUDA; on the CPU, tests
    ask for it).
    """

    def __init__(
        self,
        dsts: Sequence[torch.Tensor],
        pads: Sequence,
        *,
        names: Sequence[str] | None = None,
        explain: Callable[[object, object], NoReturn] | None = None,
        use_kernel: bool = True,
        staged: bool | None = None,
    ) -> None:
        check(len(dsts) == len(pads), "one pad (or None) per destination")
        check(names is None or len(names) == len(dsts), "one name per destination")
        self.dsts = list(dsts)
        self.pads = list(pads)
        self.uses_kernel = bool(dsts) and use_kernel and use_triton(dsts[0])
        self.kernel_ok = [rc.rows_contiguous(d) for d in self.dsts]
        self.launches = 0  # kernel launches made (for tests and benchmarks)
        self._device = dsts[0].device if dsts else torch.device("cpu")
        self._cuda = self._device.type == "cuda"
        self._device_index = self._device.index if self._cuda else -2  # no tensor's get_device() (a CPU one's is -1)
        self.host_rows_in_ring = self._cuda or bool(staged)  # a kernel on CUDA reads host rows from pinned memory only
        self._explain = explain or self._explain_source
        self._max_rows = max((d.shape[0] for d in self.dsts), default=0)
        table_bytes = (HEADER + COLS * len(self.dsts)) * 8
        self._table_bytes = table_bytes
        # per destination, fixed: everything a call needs about it, behind one lookup by index or name
        self._fields: dict[object, _Destination] = {}
        offset = _aligned(table_bytes)
        for i, d in enumerate(self.dsts):
            dest = _Destination(i, d, self.pads[i], offset, self.kernel_ok[i])
            self._fields[i] = dest
            if names is not None:
                self._fields[names[i]] = dest
            offset += _aligned(d.shape[0] * dest.row_bytes)
        self._ring_bytes = offset
        self.ring: StagingRing | None = None  # made on the first kernel call
        self._generation = 0
        self._pending: _Staged | None = None  # a copy staged, not yet committed

    def __call__(self, indices: Sequence[int], srcs: Sequence[torch.Tensor], n: int, padded: int) -> None:
        """Copy ``srcs[j][:n]`` into destination ``indices[j]`` and pad its rows ``[n, padded)``.

        CUDA graph: call it outside a capture (it writes host memory the copy reads later, and replays a
        graph of its own).
        """
        check(len(indices) == len(srcs), "one source per destination index")
        check(padded <= self._max_rows, f"need {padded} destination rows, the destinations have {self._max_rows}")
        self.stage(dict(zip(indices, srcs, strict=True)), n)
        self.commit(padded)

    def stage(self, sources: Mapping[object, torch.Tensor], n: int | None = None, *, write: bool = True) -> int:
        """Check ``sources`` (``{name or index: tensor (B, *row)}``) and stage their copy; return ``B``.

        With ``n`` given, each source needs at least ``n`` rows and ``n`` rows are copied; without it, all
        sources must have the same number of rows, 1 to the destinations' rows. Nothing reaches the
        destinations until :meth:`commit`; a new :meth:`stage` drops a staged copy never committed.
        ``write=False`` only checks (no ring buffer is taken, nothing waits on the device). Sources the
        kernel reads in place (device tensors; host tensors when not staged) must stay alive until
        :meth:`commit` has queued the copy.

        Raises
        ------
        ValueError / TypeError
            Naming the source and what to change (the ``explain`` given at construction for unknown keys,
            types, dtypes and shapes; here for devices and batch sizes).
        """
        self._pending = None  # a copy staged and never committed is dropped
        kernel = self.uses_kernel and write
        slot = gen = raw = words = None
        if kernel:
            ring = self.ring or self._make_ring()
            slot = ring.take()
            self._generation += 1
            gen, raw, words = self._generation, ring.raw[slot], ring.words[slot]
        # a raise leaves nothing staged: the entries written carry a generation no header names, and the
        # next call takes this ring buffer again
        batch, direct, fallback = self._write(sources, n, kernel, gen, raw, words)
        self._pending = _Staged(slot, gen, batch, direct, fallback)
        return batch

    def _write(self, sources, n, kernel, gen, raw, words) -> tuple[int, int, list]:
        """:meth:`stage`'s pass over the sources: checks, table entries and host rows; returns (batch,
        sources the kernel copies, sources left to ``copy_`` + ``fill_``). The hot path of every run with
        new inputs: each source costs a few attribute reads and two words (a contiguous device source
        aligned as its destination), one struct write (another device source) or one copy of its rows and
        one word (a host source)."""
        fields, explain, device_index = self._fields, self._explain, self._device_index
        pack, memory = _ENTRY.pack_into, ADDRESS_SPACE
        host_in_ring = kernel and self.host_rows_in_ring
        dense = gen + DENSE if kernel else None  # the mark of a dense device source
        fallback, batch, direct = [], n, 0
        if n is not None and n > self._max_rows:
            raise ValueError(f"batch of {n} exceeds the buffers' batch size {self._max_rows}")
        for key, src in sources.items():
            f = fields.get(key)
            if f is None:
                explain(key, src)
            listed = type(src) in _LISTS  # Python ints for a 1-D integer or bool buffer (tested before
            if listed:  # a tensor's attributes: raising AttributeError would cost a list more than this test)
                if f.list_code is None:
                    explain(key, src)
                m = len(src)
            else:
                try:
                    shape, dims = src.shape, f.dims
                    bad = (
                        src.dtype is not f.dtype  # dtypes are singletons
                        or len(shape) != dims
                        or (dims > 1 and shape[1] != f.width)  # the common case, without slicing a shape
                        or (dims > 2 and shape[1:] != f.row_shape)
                    )
                except AttributeError:  # neither a tensor nor a list
                    bad = True
                if bad:
                    explain(key, src)
                m = shape[0]
            if m != batch:  # batch: n when given, else the first source's rows
                if batch is None:
                    batch = m
                    if m > self._max_rows:  # before any host rows are copied into the ring buffer
                        raise ValueError(f"batch of {m} exceeds the buffers' batch size {self._max_rows}")
                elif n is None:
                    raise ValueError(f"inputs disagree on the batch size: {key!r} has {m} rows, others {batch}")
                elif m < n:
                    raise ValueError(f"input {key!r} has {m} rows; {n} are to be copied")
            if listed:
                if host_in_ring:  # the values go straight into the ring buffer: no tensor is made
                    pack_list(key, src, batch, f.list_code, raw, f.host_offset)
                    words[f.mark] = -gen  # read from the ring buffer (the entry's fixed host columns)
                    direct += 1
                else:  # a tensor of them, held (and copied) by the fallback
                    fallback.append((f.index, list_tensor(key, src, f.list_code, f.dtype)))
                continue
            strides = f.strides
            if src.is_cpu:
                if host_in_ring and strides is not None:  # host rows travel in the ring, read there by the kernel
                    if not src.is_contiguous():
                        src = src[:batch].contiguous()
                    at, size, to = src.data_ptr(), batch * f.row_bytes, f.host_offset  # the batch's rows
                    raw[to : to + size] = memory[at : at + size]
                    words[f.mark] = -gen
                    direct += 1
                    continue
            elif src.get_device() != device_index:  # never equal with buffers on the CPU
                raise ValueError(
                    f"input {key!r} is on {src.device}; the buffers are on {self._device} (move it, or pass it on "
                    "the CPU)"
                )
            if not kernel or strides is None:
                fallback.append((f.index, src))
                continue
            flags = f.flags
            if src.is_contiguous():  # the common case: rows row_bytes apart (cheaper to ask than the strides)
                addr = src.data_ptr()
                if not addr & (flags & WORD_MASK) - 1:  # aligned as the destination: two words, the rest fixed
                    mark = f.mark
                    words[mark] = dense
                    words[mark + SRC] = addr
                    direct += 1
                    continue
                stride = f.row_bytes
            else:
                st = src.stride()
                odd = dims > 1 and st[-1] != 1 or dims > 2 and st[1:] != strides  # fast checks, then the rule
                if odd and not src[0].is_contiguous():
                    fallback.append((f.index, src))  # rows that are not one run of bytes
                    continue
                stride = st[0] * f.element_size
                addr = src.data_ptr()
            word = flags & WORD_MASK
            if (addr | stride) & (word - 1):  # a source less aligned than its destination
                flags += widest_word(addr, stride) - word
            pack(raw, f.entry, gen, addr, stride, flags)
            direct += 1
        if batch is None:
            raise ValueError("no inputs given; pass at least one tensor or give batch_size explicitly")
        if n is None and batch < 1:
            raise ValueError("empty batch: inputs have 0 rows; skip the step instead of running it")
        return batch, direct, fallback

    def commit(self, padded: int, then: FusedLaunch | None = None) -> bool:
        """Copy what :meth:`stage` staged and pad rows ``[batch, padded)``: one launch for the kernel's
        sources, ``copy_`` + ``fill_`` for the rest. Nothing staged: nothing to do.

        ``then`` (made by :meth:`fuser`): a key's graph to run in the copy's own launch, where every source
        goes through the kernel. Returns whether it ran (else the caller replays it).
        """
        if self._pending is None:
            return False
        staged, self._pending = self._pending, None
        slot, n, fallback = staged.slot, staged.batch, staged.fallback
        fused = False
        if staged.direct:
            _HEAD.pack_into(self.ring.raw[slot], 0, n, padded, staged.generation)
            fused = self.ring.launch(slot, padded, None if fallback else then)
            self.launches += 1
        if fallback:
            dsts, pads = [self.dsts[i] for i, _ in fallback], [self.pads[i] for i, _ in fallback]
            input_copy_ref([s for _, s in fallback], dsts, n, padded, pads)
        return fused

    def fuser(self) -> Callable[[torch.cuda.CUDAGraph], FusedLaunch | None] | None:
        """What makes the copy and a key's graph (a kept CUDA graph drawing no numbers from torch's
        generators) one launch for :meth:`commit` (:meth:`.ring.StagingRing.fuse`: its owner closes what it
        returns when the graph goes); ``None`` where copies never fuse (on the CPU, or not through the
        kernel). Makes the staging ring now, so call it outside any capture."""
        if not self.uses_kernel or not self._cuda:
            return None
        return (self.ring or self._make_ring()).fuse

    def staged(self) -> StagedCopy | None:
        """The copy staged and not yet committed (``None``: none), read back from its table: for tests and
        diagnostics, never on the hot path."""
        staged = self._pending
        if staged is None:
            return None
        forms = {i: "fallback" for i, _ in staged.fallback}
        if staged.slot is not None:
            words, gen = self.ring.words[staged.slot], staged.generation
            for i in range(len(self.dsts)):
                mark = words[HEADER + COLS * i + ACTIVE]
                form = {gen: "device", gen + DENSE: "dense", -gen: "host"}.get(mark)
                if form is not None:
                    forms[i] = form
        return StagedCopy(staged.batch, dict(sorted(forms.items())))

    @property
    def driver_refusals(self) -> int:
        """Launches and event records the CUDA driver refused (each then went through torch)."""
        return 0 if self.ring is None else self.ring.driver_refusals

    @property
    def copies_launched(self) -> int:
        """Copies launched through the staging ring so far (its turn; 0 before the first)."""
        return 0 if self.ring is None else self.ring.turn

    def abandon(self) -> None:
        """Drop a staged copy (its entries carry a generation no header will name; the next call takes its
        ring buffer again)."""
        self._pending = None

    def _explain_source(self, key: object, src: object) -> NoReturn:
        f = self._fields.get(key)
        check(f is not None, f"no destination {key!r}")
        check(
            isinstance(src, torch.Tensor),
            f"source {key!r} must be a torch.Tensor (or, for a 1-D integer or bool destination, a list of ints), "
            f"got {type(src).__name__}",
        )
        dst = self.dsts[f.index]
        check(src.dtype == dst.dtype, f"source dtype {src.dtype} != destination dtype {dst.dtype}")
        raise ValueError(f"source rows {tuple(src.shape[1:])} != {tuple(dst.shape[1:])}")

    def _make_ring(self) -> StagingRing:
        """The ring, every destination's fixed entries written once into each of its buffers."""
        check(
            not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()),
            "an InputCopyPlan's first copy captures its staging graphs, so it must run outside a CUDA graph "
            "capture: copy once before capturing",
        )

        def fill_fixed(table: memoryview, base: int) -> None:
            for i, (d, pad) in enumerate(zip(self.dsts, self.pads)):
                e, dest = HEADER + COLS * i, self._fields[i]
                table[e + DST], table[e + ROW_BYTES] = d.data_ptr(), rc.row_bytes(d)
                table[e + DST_STRIDE] = d.stride(0) * d.element_size()
                # elements wider than 8 bytes never take the kernel (their pad is filled by the fallback)
                table[e + FILL] = 0 if pad is None or not self.kernel_ok[i] else rc.fill_pattern(pad, d.dtype)
                # a host source's rows, at its offset in this buffer: aligned as the destination
                table[e + HOST_SRC], table[e + DENSE_FLAGS] = base + dest.host_offset, dest.flags

        self.ring = StagingRing(
            self._device, self._ring_bytes, self._table_bytes, fill_fixed, len(self.dsts), self._max_rows
        )
        return self.ring


def _contiguous_strides(row_shape: Sequence[int]) -> tuple[int, ...]:
    """The element strides of a contiguous row of ``row_shape``."""
    strides, step = [], 1
    for size in reversed(row_shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN
