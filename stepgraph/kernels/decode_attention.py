"""Decode attention over a KV cache read in place, up to each request's length: a row per request
(:func:`decode_attention`) or pages named by a block table (:func:`paged_attention`).

Used by the example model (``attention="triton"``, either layout) and the Hugging Face adapter
(``attention="rows"``).
A default attention gathers every request's whole cache row (``kv_cache[rows]``) and runs
``scaled_dot_product_attention`` over all ``max_seq_len`` positions under a mask, so a step costs what a
decode at the full cache length costs. This kernel (flash-decoding with a fixed split of the sequence,
so the grid does not depend on the lengths and the launch is graph-safe) reads keys and values through
the row index and skips the blocks past each request's last visible position, as a serving engine's
paged decode kernel does.

The paged form is the same kernel with one more load per block of keys: the block table's entries for
those positions (a page holds ``page_size`` consecutive positions of one request).

It serves the decode and verify forwards (a few query tokens per request); prefill keeps SDPA. Results
match SDPA to floating-point tolerance, not bit for bit (another reduction order); eager and graph
replay of it are bit-identical.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_N = 32  # keys per block
MAX_ROWS = 64  # query rows a program holds: (heads per KV head) x (query tokens)
TARGET_PROGRAMS = 264  # about two per SM on an H200
PIECES = 8  # a planned row's pieces the combine loads at once


@triton.jit
def _decode_attn_partial(
    q_ptr, kv_ptr, rows_ptr, table_ptr, pos_ptr, acc_ptr, ml_ptr, plan_ptr,
    S, sq_b, sq_t, sq_h, skv_r, skv_kv, skv_h, skv_s, st_r, scale,
    T: tl.constexpr, KVH: tl.constexpr, G: tl.constexpr, HD: tl.constexpr, HDP: tl.constexpr, M: tl.constexpr,
    CHUNK: tl.constexpr, NSPLIT: tl.constexpr, BLOCK_N: tl.constexpr, IEEE: tl.constexpr, PAGE: tl.constexpr,
    PLANNED: tl.constexpr,
):  # fmt: skip
    # PAGE = 0: kv_ptr holds rows [R, 2, KVH, S, hd]; else pages [P, 2, KVH, PAGE, hd] and table_ptr the
    # block table [R, S / PAGE] of page ids.
    # PLANNED: program (item * KVH + kv head) takes positions [start, stop) of batch row b, read from the
    # host's plan (items of (b, start, stop)); else program (b * KVH + kv head, split) takes CHUNK of them
    pid = tl.program_id(0)
    kvh = pid % KVH
    if PLANNED:
        b = tl.load(plan_ptr + (pid // KVH) * 3)
        start = tl.load(plan_ptr + (pid // KVH) * 3 + 1)
        stop = tl.load(plan_ptr + (pid // KVH) * 3 + 2)
        off = pid * M
    else:
        split = tl.program_id(1)
        b = pid // KVH
        start = split * CHUNK
        stop = start + CHUNK
        off = (pid * NSPLIT + split) * M
    r = tl.arange(0, M)  # query row = head-in-group * T + token
    live = r < G * T
    t = r % T
    h = kvh * G + r // T
    d = tl.arange(0, HDP)  # the head dimension padded to a power of two >= 16 (tl.dot's least K)
    q_in = live[:, None]
    if HDP != HD:
        q_in = q_in & (d < HD)[None, :]
    q = tl.load(q_ptr + b * sq_b + t[:, None] * sq_t + h[:, None] * sq_h + d[None, :], mask=q_in, other=0.0)
    q = q.to(tl.float32)  # 16-bit inputs are exact in tf32, so the dots below lose nothing on q.k
    pos = tl.load(pos_ptr + b * T + t, mask=live, other=-1)
    last = tl.max(pos, 0)
    row = tl.load(rows_ptr + b)
    base = kv_ptr + row * skv_r + kvh * skv_h
    m_i = tl.full([M], float("-inf"), tl.float32)
    l_i = tl.zeros([M], tl.float32)
    acc = tl.zeros([M, HDP], tl.float32)
    for n0 in range(start, stop, BLOCK_N):
        if n0 <= last:  # blocks past every row's last visible position are skipped
            n = n0 + tl.arange(0, BLOCK_N)
            inside = ((n < S) & (n <= last))[:, None]  # never read past the last position (stale rows)
            if HDP != HD:
                inside = inside & (d < HD)[None, :]
            if PAGE:
                page = tl.load(table_ptr + row * st_r + n // PAGE, mask=(n < S) & (n <= last), other=0)
                at = kv_ptr + kvh * skv_h + page.to(tl.int64)[:, None] * skv_r + (n % PAGE)[:, None] * skv_s
            else:
                at = base + n[:, None] * skv_s
            k = tl.load(at + d[None, :], mask=inside, other=0.0).to(tl.float32)
            if IEEE:
                s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
            else:
                s = tl.dot(q, tl.trans(k), input_precision="tf32") * scale
            s = tl.where(n[None, :] <= pos[:, None], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing visible yet stays at 0
            p = tl.exp(s - m_ref[:, None])
            alpha = tl.exp(m_i - m_ref)
            v = tl.load(at + skv_kv + d[None, :], mask=inside, other=0.0).to(tl.float32)
            if IEEE:
                pv = tl.dot(p, v, input_precision="ieee")
            else:
                pv = tl.dot(p, v, input_precision="tf32")
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + pv
            m_i = m_new
    off = off + r
    tl.store(ml_ptr + off * 2, m_i)
    tl.store(ml_ptr + off * 2 + 1, l_i)
    tl.store(acc_ptr + off[:, None] * HDP + d[None, :], acc)


@triton.jit
def _decode_attn_combine(
    acc_ptr, ml_ptr, o_ptr, indptr_ptr, so_b, so_t, so_h,
    T: tl.constexpr, KVH: tl.constexpr, G: tl.constexpr, HD: tl.constexpr, HDP: tl.constexpr, M: tl.constexpr,
    NSPLIT: tl.constexpr, PLANNED: tl.constexpr, PIECES: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)  # request * KVH + kv head
    r = tl.program_id(1)  # one live query row per program: B * KVH programs alone leave the GPU idle
    b = pid // KVH
    t = r % T
    h = (pid % KVH) * G + r // T
    d = tl.arange(0, HDP)
    if PLANNED:  # the row's items indptr[b] .. indptr[b + 1] (none for a padded row: its output is 0);
        # its first piece alone, then the rest PIECES at a time (loaded together, not one dependent load
        # each), so the common row of one piece loads no more than on the fixed schedule
        lo = tl.load(indptr_ptr + b)
        hi = tl.load(indptr_ptr + b + 1)
        first = (pid % KVH) * M + r + lo * KVH * M  # item lo + i's row is i * KVH * M further
        some = hi > lo
        m = tl.load(ml_ptr + first * 2, mask=some, other=float("-inf"))
        for c in range(1, hi - lo, PIECES):
            s = c + tl.arange(0, PIECES)
            ok = s < hi - lo
            m = tl.maximum(m, tl.max(tl.load(ml_ptr + (first + s * KVH * M) * 2, mask=ok, other=float("-inf"))))
        m_ref = tl.where(m == float("-inf"), 0.0, m)
        w = tl.exp(tl.load(ml_ptr + first * 2, mask=some, other=float("-inf")) - m_ref)
        l_sum = tl.load(ml_ptr + first * 2 + 1, mask=some, other=0.0) * w
        acc = tl.load(acc_ptr + first * HDP + d, mask=d * 0 + hi > lo, other=0.0) * w  # the mask as a vector
        for c in range(1, hi - lo, PIECES):
            s = c + tl.arange(0, PIECES)
            ok = s < hi - lo
            off = first + s * KVH * M
            ws = tl.exp(tl.load(ml_ptr + off * 2, mask=ok, other=float("-inf")) - m_ref)
            l_sum += tl.sum(tl.load(ml_ptr + off * 2 + 1, mask=ok, other=0.0) * ws)
            part = tl.load(acc_ptr + off[:, None] * HDP + d[None, :], mask=ok[:, None], other=0.0)
            acc += tl.sum(part * ws[:, None], 0)
    else:
        first = pid * NSPLIT * M + r  # split s's row is s * M further
        m = tl.load(ml_ptr + first * 2)
        for s in range(1, NSPLIT):
            m = tl.maximum(m, tl.load(ml_ptr + (first + s * M) * 2))
        m_ref = tl.where(m == float("-inf"), 0.0, m)
        w = tl.exp(tl.load(ml_ptr + first * 2) - m_ref)
        l_sum = tl.load(ml_ptr + first * 2 + 1) * w
        acc = tl.load(acc_ptr + first * HDP + d) * w
        for s in range(1, NSPLIT):
            off = first + s * M
            w = tl.exp(tl.load(ml_ptr + off * 2) - m_ref)
            l_sum += tl.load(ml_ptr + off * 2 + 1) * w
            acc += tl.load(acc_ptr + off * HDP + d) * w
    out = acc / tl.where(l_sum > 0, l_sum, 1.0)
    tl.store(o_ptr + b * so_b + t * so_t + h * so_h + d, out.to(o_ptr.dtype.element_ty), mask=d < HD)


def fits(num_heads: int, num_kv_heads: int, tokens: int) -> bool:
    """Whether a forward of ``tokens`` query tokens per request can use :func:`decode_attention`."""
    return (num_heads // num_kv_heads) * tokens <= MAX_ROWS


def decode_attention(
    q: torch.Tensor, kv_cache: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor, scale: float
) -> torch.Tensor:
    """Causal attention of a few new tokens per request over its cache row.

    q ``[B, T, H, hd]`` (last dimension contiguous), kv_cache ``[R, 2, KVH, S, hd]`` (keys, values; the new
    tokens already written), rows ``[B]`` int64 cache rows, positions ``[B, T]`` int64 (key ``j`` is
    visible to a query at position ``p`` when ``j <= p``). Returns ``[B, T, H, hd]`` in q's dtype.

    Under ``torch.compile`` the call goes through the opaque operator ``torch.ops.stepgraph.decode_attention``:
    the launch arithmetic (splits per request) would otherwise pin the batch size in the compiled graph.
    """
    if torch.compiler.is_compiling():
        return torch.ops.stepgraph.decode_attention(q, kv_cache, rows, positions, scale)
    return _launch(q, kv_cache, rows, None, positions, scale)


def paged_attention(
    q: torch.Tensor,
    pages: torch.Tensor,
    block_table: torch.Tensor,
    rows: torch.Tensor,
    positions: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Causal attention of a few new tokens per request over its pages.

    q ``[B, T, H, hd]`` (last dimension contiguous), pages ``[P, 2, KVH, page_size, hd]`` (keys, values; the
    new tokens already written), block_table ``[R, max_pages]`` int32 (row ``r``'s entry ``j`` is the page
    holding its positions ``j * page_size ..``), rows ``[B]`` int64 block-table rows, positions ``[B, T]``
    int64. Only entries for positions up to each request's last are read. Returns ``[B, T, H, hd]``.
    Through ``torch.ops.stepgraph.paged_attention`` under ``torch.compile``.
    """
    if torch.compiler.is_compiling():
        return torch.ops.stepgraph.paged_attention(q, pages, block_table, rows, positions, scale)
    return _launch(q, pages, rows, block_table, positions, scale)


def planned_paged_attention(
    q: torch.Tensor,
    pages: torch.Tensor,
    block_table: torch.Tensor,
    rows: torch.Tensor,
    positions: torch.Tensor,
    scale: float,
    plan: torch.Tensor,
    items: int,
) -> torch.Tensor:
    """:func:`paged_attention` on a split schedule the host planned (:mod:`stepgraph.kernels.split_plan`):
    plan ``[3 * items + B + 1]`` int32 on q's device, ``items`` pieces of work ``(batch row, start, stop)``
    (positions ``start .. stop - 1``; ``0, 0, 0`` for none) then each batch row's first item (an indptr).
    The grid is ``items`` x KV heads whatever the plan says, so one capture serves every plan of the batch.
    A batch row with no items gets zeros (a padded row)."""
    return _launch(q, pages, rows, block_table, positions, scale, plan, items)


@torch.library.custom_op("stepgraph::decode_attention", mutates_args=())
def _decode_attention_op(
    q: torch.Tensor, kv_cache: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor, scale: float
) -> torch.Tensor:
    return _launch(q, kv_cache, rows, None, positions, scale)


@torch.library.custom_op("stepgraph::paged_attention", mutates_args=())
def _paged_attention_op(
    q: torch.Tensor,
    pages: torch.Tensor,
    block_table: torch.Tensor,
    rows: torch.Tensor,
    positions: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    return _launch(q, pages, rows, block_table, positions, scale)


@_decode_attention_op.register_fake
def _(q, kv_cache, rows, positions, scale):
    return q.new_empty(q.shape)


@_paged_attention_op.register_fake
def _(q, pages, block_table, rows, positions, scale):
    return q.new_empty(q.shape)


def _launch(q, kv_cache, rows, block_table, positions, scale, plan=None, items=0) -> torch.Tensor:
    B, T, H, HD = q.shape
    R, two, KVH, S, hd = kv_cache.shape
    if two != 2 or hd != HD or H % KVH or q.stride(-1) != 1 or kv_cache.stride(-1) != 1:
        raise ValueError(f"q {tuple(q.shape)} and kv_cache {tuple(kv_cache.shape)} do not fit together")
    page = 0
    if block_table is not None:  # S was the page size: the sequence is the table's width of pages
        if block_table.dim() != 2 or block_table.dtype != torch.int32 or block_table.stride(-1) != 1:
            raise ValueError(f"block_table must be a [rows, max_pages] int32 tensor, got {block_table.dtype} "
                             f"{tuple(block_table.shape)}")  # fmt: skip
        page, S = S, S * block_table.shape[1]
    G = H // KVH
    if not fits(H, KVH, T):
        raise ValueError(f"{G} heads per KV head x {T} tokens exceeds {MAX_ROWS} query rows; use SDPA")
    M = max(16, triton.next_power_of_2(G * T))
    HDP = max(16, triton.next_power_of_2(HD))
    if plan is None:
        nsplit = max(1, min(triton.cdiv(S, BLOCK_N), triton.cdiv(TARGET_PROGRAMS, B * KVH)))
        chunk = triton.cdiv(triton.cdiv(S, nsplit), BLOCK_N) * BLOCK_N
        nsplit = triton.cdiv(S, chunk)
        grid, partials, indptr = (B * KVH, nsplit), B * KVH * nsplit, rows  # indptr: an unread pointer
    else:
        if plan.dtype != torch.int32 or plan.numel() != 3 * items + B + 1 or plan.device != q.device:
            raise ValueError(f"plan must be {3 * items + B + 1} int32 on {q.device} (items of a batch of {B}), "
                             f"got {plan.numel()} {plan.dtype} on {plan.device}")  # fmt: skip
        nsplit, chunk = 1, BLOCK_N
        grid, partials, indptr = (items * KVH, 1), items * KVH, plan[3 * items :]
    dev = q.device
    acc = torch.empty(partials * M * HDP, dtype=torch.float32, device=dev)
    ml = torch.empty(partials * M * 2, dtype=torch.float32, device=dev)
    out = torch.empty(B, T, H, HD, dtype=q.dtype, device=dev)
    positions, rows = positions.contiguous(), rows.contiguous()
    ieee = q.dtype == torch.float32
    table = rows if block_table is None else block_table  # an unread pointer for rows
    st_r = 0 if block_table is None else block_table.stride(0)
    planned = plan is not None
    _decode_attn_partial[grid](
        q, kv_cache, rows, table, positions, acc, ml, plan if planned else rows,
        S, q.stride(0), q.stride(1), q.stride(2), *kv_cache.stride()[:4], st_r, scale,
        T=T, KVH=KVH, G=G, HD=HD, HDP=HDP, M=M, CHUNK=chunk, NSPLIT=nsplit, BLOCK_N=BLOCK_N, IEEE=ieee, PAGE=page,
        PLANNED=planned,
    )  # fmt: skip
    _decode_attn_combine[(B * KVH, G * T)](
        acc, ml, out, indptr, out.stride(0), out.stride(1), out.stride(2),
        T=T, KVH=KVH, G=G, HD=HD, HDP=HDP, M=M, NSPLIT=nsplit, PLANNED=planned, PIECES=PIECES,
    )  # fmt: skip
    return out


def reference_attention(
    q: torch.Tensor, kv_cache: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor, scale: float
) -> torch.Tensor:
    """The same attention through the gather and masked SDPA (float32), ``[B, T, H, hd]``."""
    S = kv_cache.shape[3]
    cached = kv_cache[rows].float()  # [B, 2, KVH, S, hd]
    mask = torch.arange(S, device=q.device)[None, None, None, :] <= positions[:, None, :, None]
    o = torch.nn.functional.scaled_dot_product_attention(
        q.float().transpose(1, 2), cached[:, 0], cached[:, 1], attn_mask=mask, scale=scale, enable_gqa=True
    )
    return o.transpose(1, 2)


def gather_pages(pages: torch.Tensor, block_table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The requests' pages laid out as cache rows: pages ``[P, 2, KVH, page_size, hd]``, block_table
    ``[R, max_pages]``, rows ``[B]`` -> ``[B, 2, KVH, max_pages * page_size, hd]``."""
    g = pages[block_table[rows].long()]  # [B, max_pages, 2, KVH, page, hd]
    B, n, two, KVH, page, hd = g.shape
    return g.permute(0, 2, 3, 1, 4, 5).reshape(B, two, KVH, n * page, hd)


def reference_paged_attention(
    q: torch.Tensor,
    pages: torch.Tensor,
    block_table: torch.Tensor,
    rows: torch.Tensor,
    positions: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """:func:`paged_attention` through the pages gathered into rows and masked SDPA (float32). Positions
    past each request's last are zeroed first: the entries behind them name pages the kernel never reads."""
    cached = gather_pages(pages, block_table, rows)
    past = torch.arange(cached.shape[3], device=q.device) > positions.amax(1)[:, None]  # [B, S]
    cached = cached.masked_fill(past[:, None, None, :, None], 0)
    return reference_attention(q, cached, torch.arange(len(rows), device=rows.device), positions, scale)
