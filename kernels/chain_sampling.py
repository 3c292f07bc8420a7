"""Chain verify sampling in two launches (target-only: draft tokens carry unit probability).

For request ``b`` and row ``j`` let ``q_j`` be the target's sampling distribution: ``softmax(logits / T)``
restricted to the top-k logits (ties at the k-th value kept) and then to the top-p set (a token is kept
when the mass of strictly more probable kept tokens is ``< p``), renormalised. Then:

* accept ``d_{j+1}`` with probability ``q_j(d_{j+1})``, walking the chain until the first rejection ``n``;
* at ``n < K`` emit a correction sampled from ``q_n`` with ``d_{n+1}`` removed (renormalised);
  if all ``K`` are accepted, emit a bonus sampled from ``q_K``.

The emitted tokens follow the target distribution exactly. Rows with ``T == 0`` are greedy and give
exactly :func:`greedy_chain_verify`'s tokens; so do rows whose logits contain NaN or ``+inf`` or are all
``-inf`` (a defined fallback). Samples use the Gumbel-max trick with Philox noise keyed by
``(seed[b], offset[b], row, token)``; launch 2 advances ``offset[b]`` by one, so a captured graph draws
fresh numbers on every replay and a seeded run reproduces.

Launch 1, temperature class: programs over (row, vocabulary split) write partial max / sum-exp /
Gumbel argmax / greedy argmax. Top-k/top-p class: one program per row finds the exact cut-off with a
multi-way bisection over sortable keys (about 10 passes over the row), then one sampling pass.
Launch 2: one program per request combines the partials and walks the chain.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._argmax import reduce_keys, sortable_key
from ._common import check, next_pow2, use_triton, vocab_split
from ._topk_topp import INF_KEY_C, NEG_INF_KEY_C, _gumbel, _row_setup, _sample_filter_kernel
from .chain_sampling_ref import SampledVerifyOutput, chain_verify_sampling_ref, sampling_probs
from .greedy_verify import INDEX_DTYPES, LOGIT_DTYPES

__all__ = ["SampledVerifyOutput", "chain_verify_sampling", "chain_verify_sampling_ref", "sampling_probs"]

BLOCK_V = 1024
SEARCH_BLOCK = 1024
SEARCH_WAYS = 4  # per element per pass ~6 + 2*WAYS ops over log_{WAYS+1}(2^32) passes: 4 is the minimum
FILTER_BLOCK = 2048  # one program per row: wide blocks and many warps keep its passes short
FILTER_WARPS = 8


@triton.jit
def _sample_partial_kernel(
    logits_ptr,
    stride_b,
    stride_j,
    draft_ptr,
    stride_draft,
    temp_ptr,
    seed_ptr,
    offset_ptr,
    gkey_ptr,
    gidx_ptr,
    m_ptr,
    s_ptr,
    skey_ptr,
    sidx_ptr,
    V,
    K,
    K1,
    n_splits,
    SPLIT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Temperature class: partial statistics of one (row, vocabulary split)."""
    row = tl.program_id(0).to(tl.int64)
    sp = tl.program_id(1)
    b, j, inv_t, excl, seed, stream = _row_setup(row, K1, K, temp_ptr, draft_ptr, stride_draft, seed_ptr, offset_ptr)
    base = logits_ptr + b * stride_b + j * stride_j
    g_best = tl.full([BLOCK], -2147483648, tl.int32)
    g_idx = tl.zeros([BLOCK], tl.int32)
    s_best = tl.full([BLOCK], -2147483648, tl.int32)
    s_idx = tl.zeros([BLOCK], tl.int32)
    m_lane = tl.full([BLOCK], float("-inf"), tl.float32)
    s_lane = tl.zeros([BLOCK], tl.float32)
    start = sp.to(tl.int64) * SPLIT
    for i in range(0, SPLIT, BLOCK):
        offs = start + i + tl.arange(0, BLOCK)
        inb = offs < V
        x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
        key = tl.where(inb, sortable_key(x), -2147483648)
        better = key > g_best
        g_best = tl.where(better, key, g_best)
        g_idx = tl.where(better, offs.to(tl.int32), g_idx)
        z = x * inv_t
        m_new = tl.maximum(m_lane, z)
        live = m_new > float("-inf")
        s_lane = tl.where(live, s_lane * tl.exp(m_lane - m_new) + tl.exp(z - m_new), 0.0)
        m_lane = m_new
        score = tl.where(inb & (offs != excl), sortable_key(z + _gumbel(seed, stream, offs)), -2147483648)
        better = score > s_best
        s_best = tl.where(better, score, s_best)
        s_idx = tl.where(better, offs.to(tl.int32), s_idx)
    m = tl.max(m_lane, axis=0)
    s = tl.sum(tl.where(m_lane > float("-inf"), s_lane * tl.exp(m_lane - m), 0.0), axis=0)
    out = row * n_splits + sp
    gk = tl.max(g_best, axis=0)
    tl.store(gkey_ptr + out, gk)
    tl.store(gidx_ptr + out, tl.min(tl.where(g_best == gk, g_idx, 2147483647), axis=0))
    sk = tl.max(s_best, axis=0)
    tl.store(skey_ptr + out, sk)
    tl.store(sidx_ptr + out, tl.min(tl.where(s_best == sk, s_idx, 2147483647), axis=0))
    tl.store(m_ptr + out, m)
    tl.store(s_ptr + out, s)


@triton.jit
def _sample_finalize_kernel(
    logits_ptr,
    stride_b,
    stride_j,
    draft_ptr,
    stride_draft,
    temp_ptr,
    seed_ptr,
    offset_ptr,
    gkey_ptr,
    gidx_ptr,
    m_ptr,
    s_ptr,
    skey_ptr,
    sidx_ptr,
    cut_ptr,
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
    K1_P2: tl.constexpr,
    NS_P2: tl.constexpr,
    HAS_CUT: tl.constexpr,
    HAS_SEQ: tl.constexpr,
    HAS_ACCEPT_LEN: tl.constexpr,
    HAS_SELECT: tl.constexpr,
):
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
    skey = tl.load(skey_ptr + offs, mask=m2, other=-2147483648)
    sample = reduce_keys(skey, tl.load(sidx_ptr + offs, mask=m2, other=2147483647), 1).to(tl.int64)
    sample_ok = tl.max(skey, axis=1) > -2147483648
    m_part = tl.load(m_ptr + offs, mask=m2, other=float("-inf"))
    m_row = tl.max(m_part, axis=1)
    s_part = tl.load(s_ptr + offs, mask=m2, other=0.0)
    s_row = tl.sum(tl.where(m_part > float("-inf"), s_part * tl.exp(m_part - m_row[:, None]), 0.0), axis=1)

    t = tl.load(temp_ptr + b).to(tl.float32)
    inv_t = 1.0 / tl.where(t > 0, t, 1.0)
    t_rows = tl.zeros([K1_P2], tl.float32) + t
    greedy = (gmax >= INF_KEY_C) | (gmax == NEG_INF_KEY_C) | (t_rows <= 0)

    d = tl.load(draft_ptr + b * stride_draft + j, mask=j < K, other=-1).to(tl.int64)
    d_ok = (j < K) & (d >= 0) & (d < V)
    x_d = tl.load(logits_ptr + b * stride_b + j * stride_j + tl.where(d_ok, d, 0), mask=d_ok, other=float("-inf"))
    x_d = x_d.to(tl.float32)
    kept_d = d_ok
    if HAS_CUT:
        cut = tl.load(cut_ptr + rows, mask=j <= K, other=-2147483648)
        kept_d = kept_d & (sortable_key(x_d).to(tl.int64) >= cut)
    q_d = tl.where(kept_d, tl.exp(x_d * inv_t - m_row) / s_row, 0.0)
    seed = tl.load(seed_ptr + b)
    off = tl.load(offset_ptr + b)
    coin = tl.rand(seed, ((off * (K1 + 1) + K1) << 32) | j.to(tl.int64))
    accept = d_ok & tl.where(greedy, d == predict, coin < q_d)
    n = tl.min(tl.where((j < K) & ~accept, j, K), axis=0).to(tl.int64)
    final_j = tl.where(greedy | ~sample_ok, predict, sample)
    final = tl.sum(tl.where(j == n, final_j, 0), axis=0)
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


def _check(logits, draft_tokens, temperature, top_k, top_p, seed, offset, seq_lens) -> None:
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


def chain_verify_sampling(
    logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    seed: torch.Tensor,
    offset: torch.Tensor,
    *,
    filtered: bool = True,
    seq_lens: torch.Tensor | None = None,
    with_accept_len: bool = False,
    with_select: bool = False,
    out: dict[str, torch.Tensor] | None = None,
) -> SampledVerifyOutput:
    """Sampled chain verification (target-only rule above) in two launches.

    Parameters
    ----------
    logits:
        Shape: ``(B, K + 1, V)``; float32/float16/bfloat16; unit stride along V.
    draft_tokens:
        Shape: ``(B, K)``; int32/int64.
    temperature, top_k, top_p:
        Per request, shape ``(B,)``: float32 (0 = greedy), int32/int64 (0 = off), float32 in (0, 1].
    seed, offset:
        Per request int64 ``(B,)``; ``offset`` is advanced by one in place (by the device).
    filtered:
        ``False`` when no row uses top-k/top-p (the temperature class: a faster, vocabulary-split launch 1;
        top_k/top_p are then ignored).

    CUDA graph: safe to capture; randomness changes on every replay through ``offset``.
    """
    _check(logits, draft_tokens, temperature, top_k, top_p, seed, offset, seq_lens)
    B, K1, V = logits.shape
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
        ref = chain_verify_sampling_ref(
            logits, draft_tokens, temperature, top_k, top_p, seed, offset, filtered=filtered, seq_lens=seq_lens
        )
        for name, t in res._asdict().items():
            if t is not None:
                t.copy_(getattr(ref, name))
        return res
    K = K1 - 1
    rows = B * K1
    drafts = draft_tokens if K > 0 else res.tokens
    if filtered:
        n_splits = 1
    else:
        n_splits = triton.cdiv(V, vocab_split(rows, V, block=BLOCK_V))
    parts = [
        torch.empty((rows, n_splits), dtype=dt, device=dev)
        for dt in (torch.int32, torch.int32, torch.float32, torch.float32, torch.int32, torch.int32)
    ]
    cut = torch.empty(rows if filtered else 1, dtype=torch.int64, device=dev)
    common = (logits, logits.stride(0), logits.stride(1), drafts, drafts.stride(0))
    if filtered:
        _sample_filter_kernel[(rows,)](
            *common,
            temperature,
            top_k,
            top_p,
            seed,
            offset,
            *parts,
            cut,
            V,
            K,
            K1,
            BLOCK=FILTER_BLOCK,
            SEARCH_BLOCK=SEARCH_BLOCK,
            WAYS=SEARCH_WAYS,
            num_warps=FILTER_WARPS,
        )
    else:
        split = vocab_split(rows, V, block=BLOCK_V)
        _sample_partial_kernel[(rows, n_splits)](
            *common,
            temperature,
            seed,
            offset,
            *parts,
            V,
            K,
            K1,
            n_splits,
            SPLIT=split,
            BLOCK=BLOCK_V,
            num_warps=4,
        )
    _sample_finalize_kernel[(B,)](
        *common,
        temperature,
        seed,
        offset,
        *parts,
        cut,
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
        K1_P2=next_pow2(K1),
        NS_P2=next_pow2(n_splits),
        HAS_CUT=filtered,
        HAS_SEQ=seq_lens is not None,
        HAS_ACCEPT_LEN=with_accept_len,
        HAS_SELECT=with_select,
        num_warps=1 if next_pow2(K1) * next_pow2(n_splits) <= 512 else 4,
    )
    return res
