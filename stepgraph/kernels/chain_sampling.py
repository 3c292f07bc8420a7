"""Chain verify sampling (target-only: draft tokens carry unit probability).

For request ``b`` and row ``j`` let ``q_j`` be the target's sampling distribution: ``softmax(logits / T)``
restricted to the top-k logits (ties at the k-th value kept), then to the top-p set (a token is kept
when the mass of strictly more probable kept tokens is ``< top_p`` of the kept mass), then to the
min-p set (probability ``>= min_p`` times the largest), renormalised. Then:

* accept ``d_{j+1}`` with probability ``q_j(d_{j+1})``, walking the chain until the first rejection ``n``;
* at ``n < K`` emit a correction sampled from ``q_n`` with ``d_{n+1}`` removed (renormalised);
  if all ``K`` are accepted, emit a bonus sampled from ``q_K``.

A pivot request (top-p on and top-k off, or a top-k above ``SMALL_TOP_K_MAX``:
:func:`.chain_sampling_ref.pivot_requests`), in the filtered class with ``pivot`` on, follows the same law
another way: every row ``j`` draws ``y_j ~ q_j`` (by a rising pivot, which never finds the top-p cut:
:mod:`._sampling_pivot`), the drafts are accepted while ``y_j == d_{j+1}`` and the first ``y_j`` that
differs (or ``y_K``) is emitted. ``P(y = d) = q(d)``, and given ``y != d``, ``y`` follows ``q`` without
``d``: the two rules give one distribution, and this one needs no kept mass.

The emitted tokens follow the target distribution exactly. Rows with ``T == 0`` are greedy and give
exactly :func:`greedy_chain_verify`'s tokens; so do rows whose logits contain NaN or ``+inf`` or are all
``-inf`` (a defined fallback), and rows whose temperature is so small that the largest logit over it is
not a finite float32 (the limit of the distribution as ``T -> 0``: a client's "almost greedy").
Randomness is Philox keyed by ``(seed[b], offset[b])``: one number per
row for the acceptance coin and one for the sample (inverse CDF over the kept mass); the last launch
advances ``offset[b]`` by one, so a captured graph draws fresh numbers on every replay and a seeded run
reproduces.

Launches, each over (row, vocabulary split) except the last:

* temperature class: 1. per split, the argmax, the max of ``x / T`` and the mass ``sum exp(z - m_split)``
  without the row's draft token;
* filtered class: 1. per split, the argmax, the max of ``x / T`` and the key range; then the cut-off rounds
  of :mod:`._sampling_filter` (8 for bfloat16 logits, 16 otherwise); then the kept mass per split. With
  ``pivot``, the pivot requests' rows skip the rounds and the kept mass and draw their tokens in the
  first launch and the rounds instead, which are fewer (:func:`._sampling_pivot.pivot_launches`; a late
  request, with a top-k and top-p, finds its top-k cut in the rounds' first launches and draws in the
  rest), no row searches a top-p cut, and the rows of small top-k requests find their cut as the small
  top-k class does: their bound in round 0, their lists in round 1, their cut and kept mass in a launch
  before the kept mass's;
* small top-k class (every sampled row has ``1 <= top_k <= TOP_K_MAX`` or no filter): the bound and
  gather of :mod:`._sampling_topk` (4 launches);
* last: one program per request combines the partials, walks the chain, picks the split that holds the
  sample from the split masses, then the block of the split from its blocks' masses (a sum each), and
  scans that block for the token.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._argmax import reduce_keys
from ._common import EXACT_ROUNDING, after_previous, check, dependent_launch, jit_any_batch, next_pow2, use_triton
from ._sampling_filter import (
    BLOCK,
    INF_KEY_C,
    NEG_INF_KEY_C,
    SPLIT_BLOCKS,
    key_shift,
    key_value,
    row_key,
    verify_stream,
)
from ._sampling_mass import NUM_WARPS, _temperature_kernel, filtered_mass
from ._sampling_pivot import _pick, pivot_buffers
from ._sampling_topk import TOP_K_MAX, UNLISTED, topk_mass
from .chain_sampling_ref import (
    SampledVerifyOutput,
    chain_verify_sampling_ref,
    filter_cut_keys_ref,
    sampling_probs,
    sortable_keys,
)
from .greedy_verify import INDEX_DTYPES, LOGIT_DTYPES

__all__ = [
    "SampledVerifyOutput",
    "chain_verify_sampling",
    "chain_verify_sampling_ref",
    "filter_cut_keys",
    "filter_cut_keys_ref",
    "sampling_probs",
    "sortable_keys",
    "TOP_K_MAX",
]

MAX_SPLITS = 32
#: Programs a launch over (row, split) aims at: eight an SM of an H200 or H100 (132 SMs). The passes are
#: bound by the latency of their loads, and most take at most 64 registers a thread at four warps, so eight
#: programs can share an SM (the pivot classes' stats and round kernels take 96: five).
PROGRAMS = 1056


def split_layout(rows: int, vocab: int) -> tuple[int, int]:
    """``(splits per row, entries per split)``: at most :data:`PROGRAMS` programs in all (a launch in one
    wave where its kernel allows eight an SM), but at least eight splits per row (the last launch scans one
    split) and at most 32, unless a split would exceed :data:`._sampling_filter.SPLIT_BLOCKS` blocks (the
    count rounds' bound); a split is a multiple of ``BLOCK``."""
    per_row = max(min(MAX_SPLITS, max(8, PROGRAMS // max(rows, 1))), triton.cdiv(vocab, SPLIT_BLOCKS * BLOCK))
    split = triton.cdiv(triton.cdiv(vocab, per_row), BLOCK) * BLOCK
    return triton.cdiv(vocab, split), split


@triton.jit
def _kept_weights(base, o, inb, kept_by, SHIFT: tl.constexpr, FILTERED: tl.constexpr):
    """The weights ``exp(x / T - m_sp)`` of entries ``o`` (where ``inb``) in the sample's row, 0 where not
    kept: the draft token ``excl`` left out and, when ``FILTERED``, the cut and min-p applied."""
    excl, cut, min_p, inv_t, m_sp, m_n = kept_by
    x = tl.load(base + o, mask=inb, other=float("-inf")).to(tl.float32)
    kept = inb & (o != excl)
    if FILTERED:
        kept = kept & (row_key(x, SHIFT) >= cut) & (tl.exp(x * inv_t - m_n) >= min_p)
    return tl.where(kept, tl.exp(x * inv_t - m_sp), 0.0), kept


@triton.jit
def _sample_in_split(base, start, V, goal, kept_by, SPLIT, BLOCK: tl.constexpr, NB_P2: tl.constexpr,
                     SHIFT: tl.constexpr, FILTERED: tl.constexpr):  # fmt: skip
    """The entry of the split ``[start, start + SPLIT)`` where the cumulative kept weight passes ``goal``:
    the kept mass of each of its blocks first (``FOLD`` blocks a step, one sum each), then the block
    that holds ``goal``, scanned (the last kept entry of the last block with mass, where float sums leave
    none; -1 when nothing is kept)."""
    FOLD: tl.constexpr = min(NB_P2, 8)
    f = tl.arange(0, FOLD)
    bi = tl.arange(0, NB_P2)
    lanes = tl.arange(0, BLOCK)
    mass = tl.zeros([NB_P2], tl.float32)
    for i in range(0, SPLIT, FOLD * BLOCK):
        blk = i // BLOCK + f
        o = start + blk[:, None].to(tl.int64) * BLOCK + lanes[None, :]
        w, _ = _kept_weights(base, o, (blk[:, None] * BLOCK < SPLIT) & (o < V), kept_by, SHIFT, FILTERED)
        mass += tl.sum(tl.where(bi[:, None] == blk[None, :], tl.sum(w, axis=1)[None, :], 0.0), axis=1)
    chosen, goal = _pick(mass, goal, NB_P2)
    o = start + chosen.to(tl.int64) * BLOCK + lanes
    w, kept = _kept_weights(base, o, o < V, kept_by, SHIFT, FILTERED)
    hit = tl.min(tl.where(kept & (tl.cumsum(w, axis=0) > goal), o, 2147483647), axis=0)
    return tl.where(hit < 2147483647, hit, tl.max(tl.where(kept, o, -1), axis=0)).to(tl.int64)


@jit_any_batch
def _finalize_kernel(
    logits_ptr,
    stride_b,
    stride_j,
    draft_ptr,
    stride_draft,
    temp_ptr,
    minp_ptr,
    seed_ptr,
    offset_ptr,
    gkey_ptr,
    gidx_ptr,
    m_ptr,
    s_ptr,
    cut_ptr,
    pivot_ptr,
    pick_ptr,
    tokens_ptr,
    ext_ptr,
    num_acc_ptr,
    bonus_ptr,
    accept_len_ptr,
    seq_ptr,
    new_seq_ptr,
    select_ptr,
    V,
    K,
    n_splits,
    SPLIT,
    BLOCK: tl.constexpr,
    K1_P2: tl.constexpr,
    NS_P2: tl.constexpr,
    NB_P2: tl.constexpr,
    SHIFT: tl.constexpr,
    FILTERED: tl.constexpr,
    PIVOT: tl.constexpr,
    LISTED: tl.constexpr,
    HAS_SEQ: tl.constexpr,
    HAS_ACCEPT_LEN: tl.constexpr,
    HAS_SELECT: tl.constexpr,
    GDC: tl.constexpr,
):
    """One program per request: combine the partials, walk the chain, sample the correction or bonus. With
    ``LISTED``, the rows of small top-k requests have their sample in ``pick`` (the cut launch drew it from
    the row's list): the split is scanned for the others (``pick`` is ``UNLISTED``) alone."""
    if GDC:  # a dependent launch: the kernel before it has ended first
        after_previous()
    b = tl.program_id(0).to(tl.int64)
    K1 = K + 1
    j = tl.arange(0, K1_P2)
    sp = tl.arange(0, NS_P2)
    rows = b * K1 + j
    m2 = (j[:, None] <= K) & (sp[None, :] < n_splits)
    offs = rows[:, None] * n_splits + sp[None, :]
    gkey = tl.load(gkey_ptr + offs, mask=m2, other=-2147483648)
    predict = reduce_keys(gkey, tl.load(gidx_ptr + offs, mask=m2, other=2147483647), 1).to(tl.int64)
    gmax = tl.max(gkey, axis=1)
    m_part = tl.load(m_ptr + offs, mask=m2, other=float("-inf"))
    m_row = tl.max(m_part, axis=1)
    s_part = tl.where(m_part > float("-inf"), tl.load(s_ptr + offs, mask=m2, other=0.0), 0.0)
    w_part = tl.where(m_part > float("-inf"), s_part * tl.exp(m_part - m_row[:, None]), 0.0)  # [K1, NS]
    s_row = tl.sum(w_part, axis=1)

    t = tl.load(temp_ptr + b).to(tl.float32)
    inv_t = 1.0 / tl.where(t > 0, t, 1.0)
    z_max = key_value(gmax, 0) * inv_t  # the largest logit (gkey: 32-bit keys) over T: past float32, the argmax
    # finite by its bits (exponent not all ones): comparisons with inf may be folded under fast-math rules
    finite = (z_max.to(tl.int32, bitcast=True) & 0x7F800000) != 0x7F800000
    greedy = (gmax >= INF_KEY_C) | (gmax == NEG_INF_KEY_C) | ((tl.zeros([K1_P2], tl.float32) + t) <= 0) | ~finite
    d = tl.load(draft_ptr + b * stride_draft + j, mask=j < K, other=-1).to(tl.int64)
    d_ok = (j < K) & (d >= 0) & (d < V)
    x_d = tl.load(logits_ptr + b * stride_b + j * stride_j + tl.where(d_ok, d, 0), mask=d_ok, other=float("-inf"))
    z_d = x_d.to(tl.float32) * inv_t
    min_p = 0.0
    kept_d = d_ok
    if FILTERED:
        min_p = tl.load(minp_ptr + b).to(tl.float32)
        cut = tl.load(cut_ptr + rows, mask=j <= K, other=-2147483648)
        kept_d = kept_d & (row_key(x_d.to(tl.float32), SHIFT) >= cut) & (tl.exp(z_d - m_row) >= min_p)
    m_all = tl.maximum(m_row, tl.where(kept_d, z_d, float("-inf")))  # the draft was left out of m_row
    w_d = tl.where(kept_d, tl.exp(z_d - m_all), 0.0)
    q_d = w_d / (tl.where(m_row > float("-inf"), s_row * tl.exp(m_row - m_all), 0.0) + w_d)
    seed = tl.load(seed_ptr + b)
    off = tl.load(offset_ptr + b)
    stream = verify_stream(off, K1)
    coin = tl.rand(seed, stream | j.to(tl.int64))
    accept = d_ok & tl.where(greedy, d == predict, coin < q_d)
    pivot = b < 0
    y = predict
    if PIVOT:  # a pivot request's rows drew their tokens: the drafts while they match them, then the first miss
        drawn = tl.load(pivot_ptr + rows, mask=j <= K, other=-2)
        pivot = tl.max(drawn, axis=0) > -2
        y = tl.where(drawn >= 0, drawn, predict)
        accept = tl.where(pivot, d_ok & (d == y), accept)
    n = tl.min(tl.where((j < K) & ~accept, j, K), axis=0).to(tl.int64)

    # the sample of row n: the split that holds u * mass, then the token inside it
    on_n = j == n
    w_n = tl.sum(tl.where(on_n[:, None], w_part, 0.0), axis=0)  # [NS] split masses, in row n's scale
    m_n = tl.sum(tl.where(on_n, m_row, 0.0), axis=0)
    total = tl.sum(w_n, axis=0)
    goal = tl.rand(seed, stream | K1) * total
    cum = tl.cumsum(w_n, axis=0)
    last_sp = tl.max(tl.where(w_n > 0, sp, 0), axis=0)
    chosen = tl.minimum(tl.min(tl.where(cum > goal, sp, NS_P2), axis=0), last_sp)
    m_sp = tl.sum(tl.sum(tl.where(on_n[:, None] & (sp[None, :] == chosen), m_part, 0.0), axis=1), axis=0)
    local = (goal - tl.sum(tl.where(sp < chosen, w_n, 0.0), axis=0)) * tl.exp(m_n - m_sp)
    excl = tl.where(n < K, tl.sum(tl.where(on_n, d, 0), axis=0), -1)
    cut_n = n * 0
    if FILTERED:
        cut_n = tl.sum(tl.where(on_n, cut, 0), axis=0)
    sample = n * 0 + UNLISTED
    if LISTED:
        sample = tl.load(pick_ptr + b * K1 + n)
    if ~pivot & (sample == UNLISTED):  # a pivot request has its token, a listed row its sample: no scan
        base = logits_ptr + b * stride_b + n * stride_j
        kept_by = (excl, cut_n, min_p, inv_t, m_sp, m_n)
        sample = _sample_in_split(base, chosen.to(tl.int64) * SPLIT, V, local, kept_by, SPLIT, BLOCK, NB_P2, SHIFT,
                                  FILTERED)  # fmt: skip
    pred_n = tl.sum(tl.where(on_n, predict, 0), axis=0)
    greedy_n = tl.sum(tl.where(on_n & greedy, 1, 0), axis=0) > 0
    final = tl.where(greedy_n | (total <= 0) | (sample < 0), pred_n, sample)
    final = tl.where(pivot, tl.sum(tl.where(on_n, y, 0), axis=0), final)
    tokens = tl.where(j < n, d, tl.where(j == n, final, -1))
    tl.store(tokens_ptr + b * K1 + j, tokens, mask=j <= K)
    tl.store(ext_ptr + b * K1 + j, tl.where(j < n, d, final), mask=j <= K)
    tl.store(num_acc_ptr + b, n)
    tl.store(bonus_ptr + b, final)
    tl.store(offset_ptr + b, off + 1)
    if HAS_ACCEPT_LEN:
        tl.store(accept_len_ptr + b, n + 1)
    if HAS_SEQ:
        s_len = tl.load(seq_ptr + b)
        tl.store(new_seq_ptr + b, (s_len + n + 1).to(s_len.dtype))
    if HAS_SELECT:
        tl.store(select_ptr + b, b * K1 + n)


def _check(logits, draft_tokens, temperature, top_k, top_p, min_p, seed, offset, seq_lens) -> None:
    check(logits.dim() == 3, f"logits must be [B, K+1, V], got shape {tuple(logits.shape)}")
    check(logits.dtype in LOGIT_DTYPES, f"logits dtype {logits.dtype} not supported; use float32, float16 or bfloat16")
    check(logits.stride(-1) == 1 or logits.shape[-1] == 1, "logits must have unit stride along V")
    B, K1, V = logits.shape
    check(K1 >= 1 and V >= 1, f"logits needs K+1 >= 1 and V >= 1, got {tuple(logits.shape)}")
    check(
        draft_tokens.dim() == 2 and draft_tokens.shape == (B, K1 - 1),
        f"draft_tokens must be [B={B}, K={K1 - 1}], got {tuple(draft_tokens.shape)}",
    )
    check(draft_tokens.dtype in INDEX_DTYPES, f"draft_tokens must be int32 or int64, got {draft_tokens.dtype}")
    check(draft_tokens.stride(-1) == 1 or K1 <= 2, "draft_tokens must have unit stride along K")
    for name, t, dtypes in (
        ("temperature", temperature, (torch.float32,)),
        ("top_k", top_k, INDEX_DTYPES),
        ("top_p", top_p, (torch.float32,)),
        ("min_p", min_p, (torch.float32,)),
        ("seed", seed, (torch.int64,)),
        ("offset", offset, (torch.int64,)),
    ):
        check(t.shape == (B,), f"{name} must be [B={B}], got {tuple(t.shape)}")
        check(t.dtype in dtypes, f"{name} must be {' or '.join(map(str, dtypes))}, got {t.dtype}")
        check(t.device == logits.device, f"{name} is on {t.device}, logits on {logits.device}")
        check(t.is_contiguous(), f"{name} must be contiguous")
    if seq_lens is not None:
        check(seq_lens.shape == (B,) and seq_lens.dtype in INDEX_DTYPES, f"seq_lens must be [B={B}] int32/int64")
        check(seq_lens.device == logits.device, f"seq_lens is on {seq_lens.device}, logits on {logits.device}")
        check(seq_lens.is_contiguous(), "seq_lens must be contiguous (the kernel reads element b at b)")


def filter_cut_keys(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    *,
    small_top_k: bool = False,
    pivot: bool = False,
) -> torch.Tensor:
    """The kernels' top-k/top-p cut-off of every row, ``[B, K+1]`` int64 in :func:`sortable_keys`' domain:
    a row keeps the logits whose key is ``>=`` its cut (before min-p). Meaningful for sampled rows with
    regular logits (``T > 0``, no NaN or ``+inf``, not all ``-inf``). For tests and debugging; equals
    :func:`filter_cut_keys_ref` on such rows. ``small_top_k``: the small top-k class's kernels (rows with
    ``1 <= top_k <= TOP_K_MAX``); ``pivot``: the ``top_p`` class's, where the rows of pivot requests
    (:func:`.chain_sampling_ref.pivot_requests`) draw without a top-p cut: a late request's cut is its top-k
    cut, the others' are meaningless."""
    B, K1, V = logits.shape
    rows, dev = B * K1, logits.device
    check(use_triton(logits), f"filter_cut_keys runs the Triton kernels; {dev} cannot run them")
    layout = split_layout(rows, V)
    parts = [torch.empty((rows, layout[0]), dtype=torch.float32, device=dev) for _ in range(2)]
    gk = [torch.empty((rows, layout[0]), dtype=torch.int32, device=dev) for _ in range(2)]
    drafts = torch.zeros((B, max(K1 - 1, 1)), dtype=torch.int64, device=dev)
    min_p = torch.zeros(B, dtype=torch.float32, device=dev)
    args = (logits, drafts, temperature, top_k, top_p, min_p, layout, *parts, *gk)
    if small_top_k:
        return topk_mass(*args).view(B, K1)
    draws = None
    if pivot:
        zeros = torch.zeros(B, dtype=torch.int64, device=dev)
        draws = (zeros, zeros.clone(), *pivot_buffers(rows, *layout, dev))
    return filtered_mass(*args, pivot=draws).view(B, K1)


def chain_verify_sampling(
    logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    seed: torch.Tensor,
    offset: torch.Tensor,
    *,
    min_p: torch.Tensor | None = None,
    filtered: bool = True,
    small_top_k: bool = False,
    pivot: bool = False,
    late: bool = True,
    seq_lens: torch.Tensor | None = None,
    with_accept_len: bool = False,
    with_select: bool = False,
    out: dict[str, torch.Tensor] | None = None,
    dependent: bool = True,
) -> SampledVerifyOutput:
    """Sampled chain verification (target-only rule above).

    Parameters
    ----------
    logits:
        Shape: ``(B, K + 1, V)``; float32/float16/bfloat16; unit stride along V.
    draft_tokens:
        Shape: ``(B, K)``; int32/int64.
    temperature, top_k, top_p:
        Per request, shape ``(B,)``: float32 (0 = greedy), int32/int64 (0 = off), float32 in (0, 1]
        (1 = off).
    seed, offset:
        Per request int64 ``(B,)``; ``offset`` is advanced by one in place (by the device).
    min_p:
        Per request float32 ``(B,)`` in [0, 1] (0 = off; ``None``: off for every request).
    filtered:
        ``False`` when no row uses top-k, top-p or min-p (the temperature class: two launches; the
        filters are then ignored).
    small_top_k:
        With ``filtered``: every sampled row either has ``1 <= top_k <= TOP_K_MAX`` (any top-p and
        min-p) or no filter at all (the small top-k class, :class:`stepgraph.Sampling`). A row with top-p
        or min-p but no such top-k breaks this promise and is sampled without its filters.
    pivot:
        With ``filtered`` and not ``small_top_k``: pivot requests (top-p on and top-k off, or a top-k above
        ``TOP_K_MAX``) draw a token per row by a rising pivot instead of finding their top-p cut (a late
        request, with top-p too, after finding its top-k cut), and small top-k requests find theirs as the
        small top-k class does (the ``top_p`` and ``general`` classes: mixed requests). Either way the
        tokens follow the same distribution; for a given seed a pivot request's differ.
    late:
        With ``pivot``: ``False`` promises no *late* request (a top-k above ``TOP_K_MAX`` with top-p, which
        finds its top-k cut in the rounds before it draws; the ``general`` class), and the rounds stop once
        the draws are done: 4 launches instead of 8 (bfloat16) or 16. A late request breaks this promise
        and is drawn with its top-k and its top-p each over the whole distribution (the smaller of the two
        sets) instead of top-p within its top-k.
    dependent:
        Each launch is a programmatic dependent of the kernel before it on sm_90 and up
        (:func:`._common.dependent_launch`): the same results, less time between launches. ``False``: plain
        stream order (``STEPGRAPH_DEPENDENT_LAUNCH=0``).

    Notes
    -----
    Launches: 2 (temperature class); 5 (small top-k class); filtered: 11 for bfloat16 logits (8 cut-off
    rounds), 19 otherwise; with ``pivot``, 12 for bfloat16 logits and 16 otherwise (the rounds end after the
    late rows' steps), 9 with ``pivot`` and not ``late``. CUDA graph: safe to capture; randomness changes on
    every replay through ``offset``.
    """
    B, K1, V = logits.shape if logits.dim() == 3 else (0, 0, 0)
    if min_p is None:
        min_p = torch.zeros(B, dtype=torch.float32, device=logits.device)
    _check(logits, draft_tokens, temperature, top_k, top_p, min_p, seed, offset, seq_lens)
    dev = logits.device
    out = dict(out or {})

    def get(name, shape, dtype):
        t = out.get(name)
        if t is None:
            return torch.empty(shape, dtype=dtype, device=dev)
        check(
            tuple(t.shape) == shape and t.dtype == dtype and t.is_contiguous(),
            f"out[{name!r}] must be contiguous {dtype} {shape}",
        )
        return t

    res = SampledVerifyOutput(
        tokens=get("tokens", (B, K1), torch.int64),
        num_accepted=get("num_accepted", (B,), torch.int64),
        bonus=get("bonus", (B,), torch.int64),
        extend_tokens=get("extend_tokens", (B, K1), torch.int64),
        accept_len=get("accept_len", (B,), torch.int64) if with_accept_len else None,
        new_seq_lens=get("new_seq_lens", (B,), seq_lens.dtype) if seq_lens is not None else None,
        select=get("select", (B,), torch.int64) if with_select else None,
    )
    if B == 0:
        return res
    if not use_triton(logits):
        placed = {name: t for name, t in res._asdict().items() if t is not None}
        return chain_verify_sampling_ref(
            logits, draft_tokens, temperature, top_k, top_p, seed, offset, min_p=min_p, filtered=filtered,
            pivot=pivot, seq_lens=seq_lens, out=placed,
        )._replace(**{n: None for n, t in res._asdict().items() if t is None})  # fmt: skip
    K = K1 - 1
    rows = B * K1
    drafts = draft_tokens if K > 0 else res.tokens
    n_splits, split = split_layout(rows, V)
    m_part, s_part = (torch.empty((rows, n_splits), dtype=torch.float32, device=dev) for _ in range(2))
    gkey, gidx = (torch.empty((rows, n_splits), dtype=torch.int32, device=dev) for _ in range(2))
    head = (logits, logits.stride(0), logits.stride(1), drafts, drafts.stride(0))
    drawn = pick = None
    if filtered:
        parts = (logits, drafts, temperature, top_k, top_p, min_p, (n_splits, split), m_part, s_part, gkey, gidx)
        if small_top_k or pivot:  # small top-k rows draw their sample from their lists
            pick = torch.empty(rows, dtype=torch.int64, device=dev)
        if small_top_k:
            cut = topk_mass(*parts, sample=(seed, offset, pick), dependent=dependent)
        elif pivot:
            workspace = pivot_buffers(rows, n_splits, split, dev, late)
            drawn = workspace[1]
            cut = filtered_mass(*parts, pivot=(seed, offset, *workspace), pick=pick, late=late, dependent=dependent)
        else:
            cut = filtered_mass(*parts, dependent=dependent)
    else:
        cut = gkey  # unused
        _temperature_kernel[(rows, n_splits)](
            *head, temperature, gkey, gidx, m_part, s_part, V, K, K1, n_splits, SPLIT=split, BLOCK=BLOCK,
            num_warps=NUM_WARPS, **EXACT_ROUNDING, **dependent_launch(logits, dependent),
        )  # fmt: skip
    ns_p2 = next_pow2(n_splits)
    _finalize_kernel[(B,)](
        *head,
        temperature,
        min_p,
        seed,
        offset,
        gkey,
        gidx,
        m_part,
        s_part,
        cut,
        drawn if drawn is not None else cut,
        pick if pick is not None else cut,
        res.tokens,
        res.extend_tokens,
        res.num_accepted,
        res.bonus,
        res.accept_len if res.accept_len is not None else res.bonus,
        seq_lens if seq_lens is not None else res.bonus,
        res.new_seq_lens if res.new_seq_lens is not None else res.bonus,
        res.select if res.select is not None else res.bonus,
        V,
        K,
        n_splits,
        SPLIT=split,
        BLOCK=BLOCK,
        K1_P2=next_pow2(K1),
        NS_P2=ns_p2,
        NB_P2=next_pow2(split // BLOCK),
        SHIFT=key_shift(logits.dtype),
        FILTERED=filtered,
        PIVOT=drawn is not None,
        LISTED=pick is not None,
        HAS_SEQ=seq_lens is not None,
        HAS_ACCEPT_LEN=with_accept_len,
        HAS_SELECT=with_select,
        num_warps=8,
        **EXACT_ROUNDING,
        **dependent_launch(logits, dependent),
    )
    return res
