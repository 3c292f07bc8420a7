"""Matrix products with few rows: ``x @ w (+ residual)`` for the decode and verify forwards.

A decode step multiplies a handful of token rows (``B x (K + 1)``) by each weight matrix: 1-3 µs of
weights to read on an H200, for which cuBLAS takes 5-8 µs, mostly the fixed cost of a small kernel. This
kernel is built for the skinny case: every program owns a strip of output columns and a slice of the
reduction, streams its part of the weights once with the whole (padded) row block in registers, and,
when the reduction is split, a second kernel sums the slices in a fixed order, adds the residual and
rounds once. On the H200 it beat cuBLAS where cuBLAS splits the reduction itself (a long
reduction into few columns: 6.8 against 7.9 µs for ``[4, 3072] @ [3072, 1024]``), tied on
``[4, 2048] @ [2048, 1024]`` and lost by about 1 µs on wide outputs (``[4, 1024] @ [1024, 4096]``).

The split is chosen from ``(N, K)`` only, never from the number of rows, and rows never mix: a row's
result is the same bits whatever the batch around it (batch invariant). Results match ``torch.mm`` to
floating-point tolerance, not bit for bit (another reduction order); eager and graph replay of it are
bit-identical.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import check, use_triton

MAX_ROWS = 64  # more rows than this go to torch (the weights are then read at a good fraction of bandwidth)
TARGET_PROGRAMS = 132  # one per SM on an H200: more slices only add partial sums to add up


@triton.jit
def _skinny_mm(
    x_ptr, w_ptr, r_ptr, o_ptr, part_ptr, M, N, K, sx_m, sw_k, sr_m, so_m, k_chunk,
    M_PAD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SPLIT: tl.constexpr, HAS_RES: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    pid_n, pid_k = tl.program_id(0), tl.program_id(1)
    m = tl.arange(0, M_PAD)
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k_lo = pid_k * k_chunk
    k_hi = tl.minimum(k_lo + k_chunk, K)
    acc = tl.zeros([M_PAD, BLOCK_N], dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        xt = tl.load(x_ptr + m[:, None] * sx_m + k[None, :], mask=(m[:, None] < M) & (k[None, :] < k_hi), other=0.0)
        wt = tl.load(w_ptr + k[:, None] * sw_k + n[None, :], mask=(k[:, None] < k_hi) & (n[None, :] < N), other=0.0)
        if UPCAST:  # Triton's CPU interpreter multiplies bfloat16 as integers; the products are exact in float32
            xt, wt = xt.to(tl.float32), wt.to(tl.float32)
        if IEEE:
            acc = tl.dot(xt, wt, acc, input_precision="ieee")
        else:
            acc = tl.dot(xt, wt, acc)
    keep = (m[:, None] < M) & (n[None, :] < N)
    if SPLIT:
        tl.store(part_ptr + (pid_k * M + m[:, None]) * N + n[None, :], acc, mask=keep)
    else:
        if HAS_RES:
            acc += tl.load(r_ptr + m[:, None] * sr_m + n[None, :], mask=keep, other=0.0).to(tl.float32)
        tl.store(o_ptr + m[:, None] * so_m + n[None, :], acc.to(o_ptr.dtype.element_ty), mask=keep)


@triton.jit
def _skinny_mm_sum(
    part_ptr, r_ptr, o_ptr, M, N, sr_m, so_m, SPLITS: tl.constexpr, HAS_RES: tl.constexpr, BLOCK: tl.constexpr
):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = i < M * N
    row, col = i // N, i % N
    acc = tl.load(part_ptr + i, mask=keep, other=0.0)
    for s in tl.static_range(1, SPLITS):  # a fixed order: the same bits on every run
        acc += tl.load(part_ptr + s * M * N + i, mask=keep, other=0.0)
    if HAS_RES:
        acc += tl.load(r_ptr + row * sr_m + col, mask=keep, other=0.0).to(tl.float32)
    tl.store(o_ptr + row * so_m + col, acc.to(o_ptr.dtype.element_ty), mask=keep)


def plan(n: int, k: int) -> tuple[int, int, int]:
    """``(block_n, block_k, splits)`` for an ``[*, k] @ [k, n]`` product: enough programs to fill the GPU
    (column strips times reduction slices), each slice at least two ``block_k`` steps long. Depends on the
    weight's shape only, so a row's result does not depend on the batch."""
    block_n = 64 if n >= 1024 else 32
    block_k = 128
    strips = triton.cdiv(n, block_n)
    splits = max(1, min(TARGET_PROGRAMS // strips, k // (2 * block_k), 8))
    return block_n, block_k, splits


def skinny_matmul(
    x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor | None = None, *, config: dict | None = None
) -> torch.Tensor:
    """``x @ w (+ residual)`` for few rows.

    x ``[M, K]``, w ``[K, N]`` (rows of the weight contiguous), residual ``[M, N]`` or None, all one
    dtype (float32, float16 or bfloat16) on one device; returns ``[M, N]`` in that dtype, accumulated in
    float32 and rounded once (as ``torch.addmm``). Above :data:`MAX_ROWS` rows, or where Triton cannot
    run, it is ``torch.mm`` / ``torch.addmm``. Under ``torch.compile`` the call goes through the opaque
    operator ``torch.ops.stepgraph.skinny_matmul`` (the row count stays symbolic). ``config`` (benchmarks)
    overrides :func:`plan`: ``block_n``, ``block_k``, ``splits``, ``num_warps``, ``num_stages``.
    """
    if torch.compiler.is_compiling() and config is None:
        return torch.ops.stepgraph.skinny_matmul(x, w, residual)
    return _launch(x, w, residual, config)


@torch.library.custom_op("stepgraph::skinny_matmul", mutates_args=())
def _skinny_matmul_op(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
    return _launch(x, w, residual)


@_skinny_matmul_op.register_fake
def _(x, w, residual):
    return x.new_empty(x.shape[0], w.shape[1])


def _check(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor | None) -> None:
    check(x.dim() == 2 and w.dim() == 2, f"x {tuple(x.shape)} and w {tuple(w.shape)} must be 2-D")
    check(x.shape[1] == w.shape[0], f"x {tuple(x.shape)} @ w {tuple(w.shape)}: inner sizes differ")
    check(x.dtype == w.dtype, f"x is {x.dtype} but w is {w.dtype}; use one dtype")
    check(x.device == w.device, f"x is on {x.device} but w is on {w.device}; put them on one device")
    if residual is not None:
        want = (x.shape[0], w.shape[1])
        check(tuple(residual.shape) == want, f"residual {tuple(residual.shape)} must be {want}")
        check(residual.dtype == x.dtype and residual.device == x.device, "residual must match x's dtype and device")


def _launch(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor | None, config: dict | None = None):
    _check(x, w, residual)
    M, K = x.shape
    N = w.shape[1]
    fast = M <= MAX_ROWS and x.dtype in (torch.float32, torch.float16, torch.bfloat16) and use_triton(x)
    if not fast or M == 0 or K == 0:
        return torch.mm(x, w) if residual is None else torch.addmm(residual, x, w)
    x = x if x.stride(1) == 1 else x.contiguous()
    w = w if w.stride(1) == 1 else w.contiguous()
    if residual is not None and residual.stride(1) != 1:
        residual = residual.contiguous()
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    interpreted = x.device.type == "cpu"
    block_n, block_k, splits = plan(N, K)
    cfg = config or {}
    block_n, block_k, splits = cfg.get("block_n", block_n), cfg.get("block_k", block_k), cfg.get("splits", splits)
    tune = {"num_warps": 4, "num_stages": 4, **{k: cfg[k] for k in ("num_warps", "num_stages") if k in cfg}}
    k_chunk = triton.cdiv(triton.cdiv(K, splits), block_k) * block_k
    splits = triton.cdiv(K, k_chunk)
    part = torch.empty(splits * M * N if splits > 1 else 1, dtype=torch.float32, device=x.device)
    res = residual if residual is not None else out
    _skinny_mm[(triton.cdiv(N, block_n), splits)](
        x, w, res, out, part, M, N, K, x.stride(0), w.stride(0), res.stride(0), out.stride(0), k_chunk,
        M_PAD=max(16, triton.next_power_of_2(M)), BLOCK_N=block_n, BLOCK_K=block_k,
        SPLIT=splits > 1, HAS_RES=residual is not None, IEEE=x.dtype == torch.float32 or interpreted,
        UPCAST=interpreted and x.dtype == torch.bfloat16, **tune,
    )  # fmt: skip
    if splits > 1:
        block = 1024
        _skinny_mm_sum[(triton.cdiv(M * N, block),)](
            part, res, out, M, N, res.stride(0), out.stride(0),
            SPLITS=splits, HAS_RES=residual is not None, BLOCK=block,
        )  # fmt: skip
    return out


def skinny_matmul_ref(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
    """The same product in float32 through torch (``[M, N]`` in x's dtype)."""
    out = x.float() @ w.float()
    if residual is not None:
        out += residual.float()
    return out.to(x.dtype)
