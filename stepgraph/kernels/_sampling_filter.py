"""The top-k / top-p cut-off of chain verify sampling, with many programs per row.

The kept set of a row is ``{key >= cut}`` over sortable integer keys of its logits (16-bit keys for
bfloat16, whose float32 keys have 16 zero bits; 32-bit keys otherwise). ``cut`` is found by a bisection
over the key interval ``[lo, hi)`` in rounds; each round is one launch over (row, vocabulary split):

* every program reads its row's state (``[lo, hi)`` and the phase) and sums its split into 16 equal buckets
  of ``[lo, hi)``: a count per bucket while looking for the top-k cut, a float64 mass ``exp(z - m)`` per
  bucket while looking for the top-p cut;
* the row's last program to store its sums (an atomic count) narrows the interval from all of them, read in
  split order, and stores the state for the next round: once a row, where every program would redo it.

``G(c)`` is the count (or mass) of entries with key >= ``c``; the search keeps ``G(lo) >= target >
G(hi)`` and narrows the interval sixteen-fold per round, so a phase takes at most four rounds over
16-bit keys and eight over 32-bit keys, and every row finishes within :func:`num_rounds` launches. The
top-k phase comes first; the top-p phase then searches ``[cut_k, max]`` with target ``top_p * G(cut_k)``.
In the ``top_p`` class, the rows that search a top-k cut (late pivot requests) count their entries in the
stats launch already, over 16 fixed buckets of every key (:func:`split_counts`), so their search takes a
round fewer.
Float64 sums of float32 terms are exact for all terms above 2**-35 of the total, so the kept set does
not depend on how the row is split (it is the same at every batch size) and matches the reference.
Entries outside ``[lo, hi)`` are skipped a block at a time, so later rounds cost little when the
interval holds few entries (a top-k of tens).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._argmax import lanes_argmax, sortable_key, track_argmax
from ._common import after_previous, jit_any_batch
from .chain_sampling_ref import SMALL_TOP_K_MAX

#: The largest top-k the small top-k path lists; a larger one without top-p draws by the pivot.
SMALL_TOP_K: tl.constexpr = tl.constexpr(SMALL_TOP_K_MAX)

INF_KEY_C: tl.constexpr = tl.constexpr(0x7F800000)  # sortable_key(+inf); NaN keys are larger
NEG_INF_KEY_C: tl.constexpr = tl.constexpr(-2139095041)  # sortable_key(-inf)
NBINS: tl.constexpr = tl.constexpr(16)
STATE: tl.constexpr = tl.constexpr(8)  # per row and round: lo, hi, g_hi, target, phase, m, k_max, top_p
TOPK: tl.constexpr = tl.constexpr(0)
TOPP_START: tl.constexpr = tl.constexpr(1)  # top-p target not known yet: this round's sums give G(lo)
TOPP: tl.constexpr = tl.constexpr(2)
DONE: tl.constexpr = tl.constexpr(3)

BLOCK = 1024  # entries per step of every pass; a split is a multiple of it
#: Blocks a split holds at most: a lane counts a bucket's entries in a byte (:func:`add_counts`, one entry a
#: block at most), and a bucket's total over the split in a 16-bit field (:func:`bucket_totals`).
SPLIT_BLOCKS = 63
MASS_BLOCK: tl.constexpr = tl.constexpr(128)  # float64 [16, MASS_BLOCK] per-lane bucket sums in registers


def num_rounds(key_bits: int) -> int:
    """Launches that finish both phases for keys of ``key_bits`` bits (16 buckets: 4 bits a round)."""
    return 2 * ((key_bits + 3) // 4)


def key_shift(dtype) -> int:
    """16 for bfloat16 (its float32 keys end in 16 zero bits), else 0."""
    import torch

    return 16 if dtype == torch.bfloat16 else 0


@triton.jit
def row_key(x, SHIFT: tl.constexpr):
    """Sortable key of float32 ``x`` as int64, in the row's key domain (``>> SHIFT``)."""
    return (sortable_key(x) >> SHIFT).to(tl.int64)


@triton.jit
def regular_key(x, SHIFT: tl.constexpr):
    """:func:`row_key` as int32 for entries of a regular row (no NaN: NaN keys are not canonical here) in the
    logits' dtype, with fewer instructions: a bfloat16 key (``SHIFT`` 16) comes from the 16 bits as they are
    loaded."""
    if SHIFT == 16:
        b = x.to(tl.int16, bitcast=True).to(tl.int32)  # sign-extended: the float32 key's high half
    else:
        b = x.to(tl.float32).to(tl.int32, bitcast=True)
    b = tl.where(b == -(1 << (31 - SHIFT)), 0, b)  # -0.0 is +0.0
    return b ^ ((b >> 31) & ((1 << (31 - SHIFT)) - 1))


@triton.jit
def key_value(key, SHIFT: tl.constexpr):
    """The float32 value of a row key (the inverse of :func:`row_key`; -0.0 comes back as +0.0). The
    bits ``>> SHIFT`` dropped are ones in a negative value's key (its float's are zeros)."""
    b = ((key << SHIFT) | tl.where(key < 0, (1 << SHIFT) - 1, 0)).to(tl.int32)
    return (b ^ ((b >> 31) & 0x7FFFFFFF)).to(tl.float32, bitcast=True)


@triton.jit
def key_floor(lo, SHIFT: tl.constexpr):
    """The float32 ``f`` such that ``x >= f`` exactly where ``row_key(x, SHIFT) >= lo`` (int64, any value), for
    every ``x`` of a regular row (no NaN or +inf) in the logits' dtype: a float compare an entry in place of
    its key. Keys below ``-inf``'s give ``-inf``; those above ``+inf``'s give ``+inf``, which no such ``x``
    reaches."""
    bounded = tl.minimum(tl.maximum(lo, NEG_INF_KEY_C >> SHIFT), INF_KEY_C >> SHIFT)
    return key_value(bounded.to(tl.int32), SHIFT)


@jit_any_batch
def _stats_kernel(
    logits_ptr,
    stride_b,
    stride_j,
    temp_ptr,
    topk_ptr,
    topp_ptr,
    gkey_ptr,
    gidx_ptr,
    zmax_ptr,
    kmin_ptr,
    kmax_ptr,
    state_ptr,
    done_ptr,
    V,
    K1,
    n_splits,
    SPLIT,
    BLOCK: tl.constexpr,
    NS_P2: tl.constexpr,
    SHIFT: tl.constexpr,
    GDC: tl.constexpr,
):
    """Per (row, split): greedy argmax key and index, max of ``x / T``, min and max key; the row's last program
    to store them (an atomic count, ``done_ptr [rows]`` int32 zeroed) stores the row's search state before the
    first round (:func:`initial_state`) at ``state_ptr [rows, STATE]``."""
    if GDC:  # a dependent launch: the kernel before it has ended first
        after_previous()
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    b = row // K1
    t = tl.load(temp_ptr + b).to(tl.float32)
    inv_t = 1.0 / tl.where(t > 0, t, 1.0)
    base = logits_ptr + b * stride_b + (row % K1) * stride_j
    gk, gi, z_max, k_min = split_stats(base, sp.to(tl.int64) * SPLIT, V, inv_t, SPLIT, BLOCK, SHIFT)
    store_stats(row * n_splits + sp, gk, gi, z_max, k_min, gkey_ptr, gidx_ptr, zmax_ptr, kmin_ptr, kmax_ptr, SHIFT)
    tl.debug_barrier()  # every thread's stores are issued before the count says so
    if tl.atomic_add(done_ptr + row, 1, sem="acq_rel", scope="gpu") == n_splits - 1:
        tl.store(done_ptr + row, 0)
        no_first = kmin_ptr  # PIVOT off: no first counts to read
        store_initial_state(state_ptr, row, K1, V, n_splits, temp_ptr, topk_ptr, topp_ptr, kmin_ptr, kmax_ptr, gkey_ptr,
                            zmax_ptr, no_first, NS_P2, SHIFT, False, False)  # fmt: skip


@triton.jit
def load_ahead(base, offs, V, end):
    """The entries at ``offs``, ``-inf`` from ``min(V, end)`` on. The passes load each step's next block
    first, so that its load runs under the work on this one."""
    return tl.load(base + offs, mask=(offs < V) & (offs < end), other=float("-inf"))


@triton.jit
def split_stats(base, start, V, inv_t, SPLIT, BLOCK: tl.constexpr, SHIFT: tl.constexpr):
    """Over ``[start, start + SPLIT) ∩ [0, V)``: ``(argmax key, its lowest index, max of x * inv_t, min key
    >> SHIFT)``."""
    g_best = tl.full([BLOCK], -2147483648, tl.int32)
    g_idx = tl.zeros([BLOCK], tl.int32)
    k_min = tl.full([BLOCK], 2147483647, tl.int32)
    z_max = tl.full([BLOCK], float("-inf"), tl.float32)
    ahead = load_ahead(base, start + tl.arange(0, BLOCK), V, start + SPLIT)
    for i in range(0, SPLIT, BLOCK):
        offs = start + i + tl.arange(0, BLOCK)
        inb = offs < V
        x = ahead.to(tl.float32)
        ahead = load_ahead(base, offs + BLOCK, V, start + SPLIT)
        g_best, g_idx, key = track_argmax(g_best, g_idx, x, inb, offs)
        k_min = tl.minimum(k_min, tl.where(inb, key >> SHIFT, 2147483647))
        z_max = tl.maximum(z_max, x * inv_t)
    gk, gi = lanes_argmax(g_best, g_idx)
    return gk, gi, tl.max(z_max, axis=0), tl.min(k_min, axis=0)


@triton.jit
def split_counts(base, start, V, inv_t, SPLIT, BLOCK: tl.constexpr, SHIFT: tl.constexpr):
    """:func:`split_stats` for a row that searches its top-k cut from every key, with its entries counted in
    the 16 :func:`first_bucket` buckets: ``(argmax key, its lowest index, max of x * inv_t, lowest key,
    counts [16] int32)``. The max of ``x * inv_t`` is the argmax's (rounding keeps the order), and the
    lowest key of all stands for the min key: the search starts below every key anyway. Two running values
    a lane where :func:`split_stats` keeps four leave the stats kernel no more registers than its other rows'
    passes take."""
    g_best = tl.full([BLOCK], -2147483648, tl.int32)
    g_idx = tl.zeros([BLOCK], tl.int32)
    c0, c1, c2, c3 = no_counts(BLOCK)
    ahead = load_ahead(base, start + tl.arange(0, BLOCK), V, start + SPLIT)
    for i in range(0, SPLIT, BLOCK):
        offs = start + i + tl.arange(0, BLOCK)
        inb = offs < V
        x = ahead.to(tl.float32)
        ahead = load_ahead(base, offs + BLOCK, V, start + SPLIT)
        g_best, g_idx, key = track_argmax(g_best, g_idx, x, inb, offs)
        c0, c1, c2, c3 = add_counts(c0, c1, c2, c3, first_bucket(key >> SHIFT, SHIFT), inb)
    gk, gi = lanes_argmax(g_best, g_idx)
    z_max = tl.where(gk > -2147483648, key_value(gk, 0) * inv_t, float("-inf"))
    return gk, gi, z_max, gk * 0 + lowest_key(SHIFT), bucket_totals(c0, c1, c2, c3)


@triton.jit
def first_bucket(key, SHIFT: tl.constexpr):
    """Which of the 16 equal buckets of every key ``>> SHIFT`` (int32, from :func:`lowest_key` on) holds
    ``key``: its top four bits, in key order."""
    return ((key - lowest_key(SHIFT)).to(tl.uint32, bitcast=True) >> (28 - SHIFT)).to(tl.int32)


@triton.jit
def lowest_key(SHIFT: tl.constexpr):
    """The lowest key ``>> SHIFT`` of all: ``-2**(31 - SHIFT)``."""
    return -(1 << (31 - SHIFT))


@triton.jit
def no_counts(BLOCK: tl.constexpr):
    """Four int32 words a lane, all zero: :func:`add_counts`'s 16 counts."""
    return (tl.zeros([BLOCK], tl.int32), tl.zeros([BLOCK], tl.int32), tl.zeros([BLOCK], tl.int32),
            tl.zeros([BLOCK], tl.int32))  # fmt: skip


@triton.jit
def add_counts(c0, c1, c2, c3, bucket, live):
    """One more entry in bucket ``bucket`` (0..15) of each lane where ``live``: a byte a bucket, four
    buckets a word (a lane sees fewer than 256 entries)."""
    field = tl.where(live, 1 << ((bucket & 3) * 8), 0)
    word = bucket >> 2
    return (c0 + tl.where(word == 0, field, 0), c1 + tl.where(word == 1, field, 0),
            c2 + tl.where(word == 2, field, 0), c3 + tl.where(word == 3, field, 0))  # fmt: skip


@triton.jit
def bucket_totals(c0, c1, c2, c3):
    """``[16]`` int32: :func:`add_counts`'s words (``[N]`` each) summed over the lanes, bucket by bucket. A
    word's even and its odd bytes are summed apart, as 16-bit fields (a bucket's total is at most a split's
    entries: :data:`SPLIT_BLOCKS`), all eight sums in one reduction over ``[N, 8]``: one exchange across the
    warps, where a sum a bucket would take sixteen."""
    EVEN: tl.constexpr = 0x00FF00FF
    N: tl.constexpr = c0.shape[0]
    words01 = tl.join(tl.join(c0 & EVEN, (c0 >> 8) & EVEN), tl.join(c1 & EVEN, (c1 >> 8) & EVEN))
    words23 = tl.join(tl.join(c2 & EVEN, (c2 >> 8) & EVEN), tl.join(c3 & EVEN, (c3 >> 8) & EVEN))
    sums = tl.sum(tl.reshape(tl.join(words01, words23), [N, 8]), axis=0)  # [byte % 2, word % 2, word // 2]
    bins = tl.arange(0, NBINS)  # word bins // 4, byte bins % 4: in the low field of its sum or the high one
    at = (bins % 2) * 4 + (bins // 4 % 2) * 2 + bins // 8
    field = tl.sum(tl.where(at[:, None] == tl.arange(0, 8)[None, :], sums[None, :], 0), axis=1)
    return tl.where(bins % 4 >= 2, (field >> 16) & 0xFFFF, field & 0xFFFF)


@triton.jit
def split_softmax(base, start, V, excl, inv_t, SPLIT, BLOCK: tl.constexpr):
    """Over ``[start, start + SPLIT) ∩ [0, V)``: ``(argmax key, its lowest index, m = max z, sum exp(z - m))``
    with ``z = x * inv_t``; the mass leaves out entry ``excl``."""
    g_best = tl.full([BLOCK], -2147483648, tl.int32)
    g_idx = tl.zeros([BLOCK], tl.int32)
    m_lane = tl.full([BLOCK], float("-inf"), tl.float32)
    s_lane = tl.zeros([BLOCK], tl.float32)
    for i in range(0, SPLIT, BLOCK):
        offs = start + i + tl.arange(0, BLOCK)
        inb = offs < V
        x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
        g_best, g_idx, _ = track_argmax(g_best, g_idx, x, inb, offs)
        z = tl.where(offs != excl, x * inv_t, float("-inf"))
        m_new = tl.maximum(m_lane, z)
        live = m_new > float("-inf")
        s_lane = tl.where(live, s_lane * tl.exp(m_lane - m_new) + tl.exp(z - m_new), 0.0)
        m_lane = m_new
    m = tl.max(m_lane, axis=0)
    gk, gi = lanes_argmax(g_best, g_idx)
    return gk, gi, m, tl.sum(tl.where(m_lane > float("-inf"), s_lane * tl.exp(m_lane - m), 0.0), axis=0)


@triton.jit
def store_stats(out, gk, gi, z_max, k_min, gkey_ptr, gidx_ptr, zmax_ptr, kmin_ptr, kmax_ptr, SHIFT: tl.constexpr):
    """Stores a split's stats (:func:`split_stats`) at ``out``; its max key is the argmax key ``>> SHIFT``."""
    tl.store(gkey_ptr + out, gk)
    tl.store(gidx_ptr + out, gi)
    tl.store(zmax_ptr + out, z_max)
    tl.store(kmin_ptr + out, k_min)
    tl.store(kmax_ptr + out, gk >> SHIFT)


@triton.jit
def verify_stream(offset, K1):
    """A request's random stream at ``offset`` for a chain of ``K1`` verify rows, in the counter's high word
    (:func:`.philox.verify_stream`): every number a sampled verify draws for the request is ``tl.rand(seed,
    verify_stream(offset, K1) | counter)``."""
    return (offset * (K1 + 1) + K1) << 32


@triton.jit
def pivot_request(t, k, top_p):
    """A request whose rows draw by a rising pivot (:mod:`._sampling_pivot`) and skip the top-p cut-off
    search: sampled, with top-p on and top-k off, or a top-k above ``SMALL_TOP_K_MAX`` (with or without
    top-p: :func:`late_pivot_request`) (``chain_sampling_ref.pivot_requests``)."""
    top_p_alone = (k <= 0) & (top_p > 0) & (top_p < 1.0)
    return (t > 0) & (top_p_alone | ((k > SMALL_TOP_K) & (top_p > 0)))


@triton.jit
def late_pivot_request(t, k, top_p):
    """A pivot request with a top-k above ``SMALL_TOP_K_MAX`` and top-p: its rows find their top-k cut in the
    rounds' top-k phase, then draw from it (``chain_sampling_ref.late_pivot_requests``)."""
    return pivot_request(t, k, top_p) & (k > SMALL_TOP_K) & (top_p < 1.0)


@triton.jit
def small_top_k_request(t, k):
    """A sampled request with ``1 <= top_k <= SMALL_TOP_K_MAX``: its kept set is found among the entries at or
    above a bound on its k-th logit (:mod:`._sampling_topk`), whatever its top-p and min-p."""
    return (t > 0) & (k >= 1) & (k <= SMALL_TOP_K)


@triton.jit
def bucket_log2(lo, hi):
    """log2 of the bucket width of ``[lo, hi)`` (int64): the least ``s >= 0`` with ``16 << s >= hi - lo``. It is
    ``ceil(log2(hi - lo)) - 4``, read from the exponent of ``hi - lo - 1`` as a float64 (exact below ``2**53``):
    a few instructions where a loop would take one step a power of two."""
    bits = (hi - lo - 1).to(tl.float64).to(tl.int64, bitcast=True)  # a span below 1: 0 or the sign bit
    return tl.maximum((bits >> 52) - 1026, 0)


@triton.jit
def _narrow(lo, hi, g_hi, hist, target):
    """One bisection step: ``hist`` holds the sums of the 16 buckets of ``[lo, hi)``. Returns the bucket
    ``[lo', hi')`` with ``G(lo') >= target > G(hi')`` and ``G(hi')``."""
    step = 1 << bucket_log2(lo, hi)
    bins = tl.arange(0, NBINS)
    g = g_hi + (tl.sum(hist, axis=0) - tl.cumsum(hist, axis=0) + hist)  # G(lo + step * bin)
    valid = lo + step * bins < hi
    b_lo = tl.max(tl.where(valid & (g >= target), bins, 0), axis=0)
    nb = b_lo + 1
    has_hi = (nb < NBINS) & (lo + step * nb < hi)
    g_nb = tl.sum(tl.where(bins == nb, g, 0.0), axis=0)
    return lo + step * b_lo, tl.where(has_hi, lo + step * nb, hi), tl.where(has_hi, g_nb, g_hi)


@triton.jit
def _settle(lo, hi, g_hi, phase, k_max, top_p):
    """Phase changes once an interval has shrunk to one key: top-k done -> top-p over [cut_k, k_max]
    (or done when top-p is off); top-p done -> done. The cut is then ``lo``."""
    to_p = (phase == TOPK) & (hi - lo <= 1)
    hi = tl.where(to_p, k_max + 1, hi)
    g_hi = tl.where(to_p, 0.0, g_hi)
    phase = tl.where(to_p, tl.where(top_p < 1.0, TOPP_START, DONE), phase)
    phase = tl.where((phase != TOPK) & (hi - lo <= 1), DONE, phase)
    return hi, g_hi, phase


@triton.jit
def initial_state(
    row, K1, V, n_splits, temp_ptr, topk_ptr, topp_ptr, kmin_ptr, kmax_ptr, gkey_ptr, zmax_ptr, first_ptr,
    NS_P2: tl.constexpr, SHIFT: tl.constexpr, PIVOT: tl.constexpr, LATE: tl.constexpr,
):  # fmt: skip
    """The row's search state before the first round, from the stats of every split (read from L2: the stats
    launch's last program of the row reads those its other programs stored). ``PIVOT``: the rows of pivot and small
    top-k requests are done at once, but the top-k phase of late pivot requests, and no row searches a top-p
    cut; the stats launch counted a late row's entries in the 16 :func:`first_bucket` buckets, ``first_ptr
    [rows, n_splits, 16]`` int32, so its search starts in one of them. Without ``LATE`` (no late request
    promised) a late request's rows draw as other pivot rows do, and every row is done. Returns ``(lo, hi,
    g_hi, target, phase, m, k_max, top_p)``."""
    sp = tl.arange(0, NS_P2)
    b = row // K1
    m_sp = sp < n_splits
    stats = row * n_splits + sp
    lo = tl.min(tl.load(kmin_ptr + stats, mask=m_sp, other=2147483647, cache_modifier=".cg"), axis=0).to(tl.int64)
    k_max = tl.max(tl.load(kmax_ptr + stats, mask=m_sp, other=-2147483648, cache_modifier=".cg"), axis=0).to(tl.int64)
    gk = tl.max(tl.load(gkey_ptr + stats, mask=m_sp, other=-2147483648, cache_modifier=".cg"), axis=0)
    m = tl.max(tl.load(zmax_ptr + stats, mask=m_sp, other=float("-inf"), cache_modifier=".cg"), axis=0)
    t = tl.load(temp_ptr + b)
    k = tl.load(topk_ptr + b).to(tl.int64)
    top_p = tl.load(topp_ptr + b).to(tl.float64)
    regular = (gk < INF_KEY_C) & (gk != NEG_INF_KEY_C) & (t > 0)
    if PIVOT:  # pivot requests draw without the cut; small top-k requests find it from their lists
        late = late_pivot_request(t, k, top_p) & LATE  # its top-k cut here, then draws from it
        regular = regular & (~pivot_request(t, k, top_p) | late) & ~small_top_k_request(t, k)
        top_p = tl.where(late, 1.0, top_p)
    k_on = (k > 0) & (k < V)
    phase = tl.where(regular, tl.where(k_on, TOPK, tl.where(top_p < 1.0, TOPP_START, DONE)), DONE)
    if PIVOT:  # no top-p search: every top-p row here is a pivot or small top-k row, or keeps nothing
        lo = tl.where(regular & (top_p < 1.0), k_max + 1, lo)  # top_p <= 0: the reference keeps no entry
        phase = tl.where(top_p < 1.0, DONE, phase)
    hi, g_hi, phase = _settle(lo, k_max + 1, top_p * 0.0, phase, k_max, top_p)
    target = k.to(tl.float64)
    if PIVOT:  # noqa: SIM102 (a constexpr)
        if late & (phase == TOPK):  # its first count is done: [lo, hi) narrows from every key's
            bins = tl.arange(0, NBINS)
            p = first_ptr + (row * n_splits + sp[:, None]) * NBINS + bins[None, :]
            hist = tl.sum(tl.load(p, mask=m_sp[:, None], other=0, cache_modifier=".cg"), axis=0).to(tl.float64)
            every = row * 0 + lowest_key(SHIFT)
            lo, hi, g_hi = _narrow(every, -every, top_p * 0.0, hist, target)
            hi, g_hi, phase = _settle(lo, tl.minimum(hi, k_max + 1), g_hi, phase, k_max, top_p)
    return lo, hi, g_hi, target, phase, m, k_max, top_p


@triton.jit
def store_initial_state(
    state_ptr, row, K1, V, n_splits, temp_ptr, topk_ptr, topp_ptr, kmin_ptr, kmax_ptr, gkey_ptr, zmax_ptr, first_ptr,
    NS_P2: tl.constexpr, SHIFT: tl.constexpr, PIVOT: tl.constexpr, LATE: tl.constexpr,
):  # fmt: skip
    """Stores :func:`initial_state` at ``state_ptr [rows, STATE]``: by the stats launch's last program of the row."""
    lo, hi, g_hi, target, phase, m, k_max, top_p = initial_state(
        row, K1, V, n_splits, temp_ptr, topk_ptr, topp_ptr, kmin_ptr, kmax_ptr, gkey_ptr, zmax_ptr, first_ptr, NS_P2,
        SHIFT, PIVOT, LATE,
    )  # fmt: skip
    store_state(state_ptr + row * STATE, lo, hi, g_hi, target, phase, m, k_max, top_p)


@triton.jit
def load_state(s):
    """A row's search state as :func:`store_state` stored it at ``s``: ``(lo, hi, g_hi, target, phase, m, k_max,
    top_p)``, :func:`initial_state`'s types."""
    lo = tl.load(s).to(tl.int64)
    hi = tl.load(s + 1).to(tl.int64)
    g_hi = tl.load(s + 2)
    target = tl.load(s + 3)
    phase = tl.load(s + 4).to(tl.int32)
    m = tl.load(s + 5).to(tl.float32)
    k_max = tl.load(s + 6).to(tl.int64)
    top_p = tl.load(s + 7)
    return lo, hi, g_hi, target, phase, m, k_max, top_p


@triton.jit
def narrowed_state(lo, hi, g_hi, target, phase, k_max, top_p, part, n_splits, NS_P2: tl.constexpr):
    """The state after a round of a row still searching, from the state before it and the round's bucket
    sums of every split, ``part [n_splits, 16]`` float64, summed in split order (read from L2: the row's last
    program to store its sums reads the others'). Returns ``(lo, hi, g_hi, target, phase)``."""
    sp = tl.arange(0, NS_P2)
    bins = tl.arange(0, NBINS)
    p = part + sp[:, None] * NBINS + bins[None, :]
    hist = tl.sum(tl.load(p, mask=(sp < n_splits)[:, None], other=0.0, cache_modifier=".cg"), axis=0)
    target = tl.where(phase == TOPP_START, top_p * (g_hi + tl.sum(hist, axis=0)), target)
    phase = tl.where(phase == TOPP_START, TOPP, phase)
    lo, hi, g_hi = _narrow(lo, hi, g_hi, hist, target)
    hi, g_hi, phase = _settle(lo, hi, g_hi, phase, k_max, top_p)
    return lo, hi, g_hi, target, phase


@triton.jit
def store_state(s, lo, hi, g_hi, target, phase, m, k_max, top_p):
    """Stores a row's search state (:func:`initial_state`'s tuple) at ``s``: ``STATE`` float64."""
    tl.store(s, lo.to(tl.float64))
    tl.store(s + 1, hi.to(tl.float64))
    tl.store(s + 2, g_hi)
    tl.store(s + 3, target)
    tl.store(s + 4, phase.to(tl.float64))
    tl.store(s + 5, m.to(tl.float64))
    tl.store(s + 6, k_max.to(tl.float64))
    tl.store(s + 7, top_p)
