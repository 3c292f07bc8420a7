"""Example models: a small Llama-style target and an EAGLE-style draft head, plain PyTorch.

Both keep a static KV cache indexed by *cache row* (one per request, plus a scratch row that padded
batch rows write to), so a forward over ``[B, T]`` tokens is graph-safe: fixed shapes, no host syncs.
What a row stands for is the cache's (:mod:`stepgraph.kv`): a row of ``max_seq_len`` positions
(``kv="rows"``) or pages named by a block table (``kv="paged"``); the target and its draft share one.
Weights are random but deterministic (a seeded generator); nothing is downloaded.

The residual branches are scaled down (``residual_scale``) so each token's next-token prediction is
dominated by the token itself; a draft head that shares the embedding and LM head then agrees with the
target often, which gives realistic acceptance lengths on random weights.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from stepgraph.kernels import triton_interprets
from stepgraph.kernels.decode_attention import fits
from stepgraph.kernels.skinny_matmul import skinny_matmul
from stepgraph.kv import KVCache, make_kv


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the example target (and its draft head)."""

    vocab_size: int = 512
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 16
    intermediate_size: int = 128
    max_seq_len: int = 256
    max_requests: int = 8
    residual_scale: float = 0.05
    rope_theta: float = 10000.0
    seed: int = 0
    #: "sdpa": gather the cache rows and run masked SDPA over the whole cache (any device);
    #: "triton": decode and verify forwards read the rows in place up to each request's length
    #: (:mod:`stepgraph.kernels.decode_attention`), prefill keeps SDPA
    attention: str = "sdpa"
    #: "torch": the layers' projections through torch.mm / torch.addmm;
    #: "triton": the MLP's down projection (the longest reduction) through
    #: :func:`stepgraph.kernels.skinny_matmul`, made for the few rows of decode and verify forwards, where
    #: cuBLAS splits the reduction and adds a second kernel; on the other projections cuBLAS was as fast
    #: or faster on the H200 (``bench_kernels.py --only matmul``). Prefill's many rows still go to torch.
    matmul: str = "torch"
    #: "rows": a cache row of max_seq_len positions per request; "paged": pages of page_size positions
    #: from a pool of num_pages (default: the rows' memory), named per request by a block table
    kv: str = "rows"
    page_size: int = 16
    num_pages: int | None = None
    #: the paged cache's attention schedule: "fixed", or "planned" on the host before each replay
    #: (:class:`stepgraph.kv.PagedKV`)
    kv_schedule: str = "fixed"

    def __post_init__(self) -> None:
        if self.attention not in ("sdpa", "triton"):
            raise ValueError(f"attention must be 'sdpa' or 'triton', got {self.attention!r}")
        if self.kv not in ("rows", "paged"):
            raise ValueError(f"kv must be 'rows' or 'paged', got {self.kv!r}")
        if self.matmul not in ("torch", "triton"):
            raise ValueError(f"matmul must be 'torch' or 'triton', got {self.matmul!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")

    @property
    def scratch_row(self) -> int:
        """Cache row that padded batch rows read and write (never a real request's)."""
        return self.max_requests


#: The Qwen3-0.6B shape (random weights) used by the GPU benchmarks.
QWEN3_0_6B = ModelConfig(
    vocab_size=151936,
    hidden_size=1024,
    num_layers=28,
    num_heads=16,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=3072,
    max_seq_len=1024,
    max_requests=64,
)

PRESETS = {"tiny": ModelConfig(), "qwen3-0.6b": QWEN3_0_6B}


def config_kv(cfg: ModelConfig, device) -> KVCache:
    """The cache a config asks for: ``max_requests`` rows of ``max_seq_len`` positions, or pages."""
    return make_kv(
        cfg.kv,
        cfg.max_requests,
        cfg.max_seq_len,
        device,
        page_size=cfg.page_size,
        num_pages=cfg.num_pages,
        schedule=cfg.kv_schedule,
    )


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Masked SDPA with grouped KV heads: q ``[B, H, T, hd]``, k and v ``[B, KVH, S, hd]``, mask ``[B, 1, T, S]``
    (boolean, or added to the scores in q's dtype) -> ``[B, T, H, hd]`` contiguous. Under torch.compile it is
    one opaque op (``stepgraph::masked_attention``): SDPA's choice of kernel looks at whether a size is 1, so
    written inline it would compile a batch (or a token) of one apart from the rest. Run eagerly it is SDPA
    itself: a custom op's dispatch adds about 10 µs of host time a call (to SDPA's 70-90), and its first call
    imports torch._dynamo."""
    if torch.compiler.is_compiling():
        return torch.ops.stepgraph.masked_attention(q, k, v, mask)
    return _masked_sdpa(q, k, v, mask)


def _masked_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True).transpose(1, 2).contiguous()


@torch.library.custom_op("stepgraph::masked_attention", mutates_args=())
def _masked_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return _masked_sdpa(q, k, v, mask)


@_masked_attention_op.register_fake
def _(q, k, v, mask):
    B, H, T, _ = q.shape
    return q.new_empty((B, T, H, v.shape[-1]))


def _rope(qkv: torch.Tensor, heads: int, kv_heads: int, rope) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary embedding of the queries and keys of qkv ``[B, T, heads + 2 * kv_heads, hd]`` over interleaved
    pairs, in float32. Returns the queries ``[B, T, heads, hd]`` and the new keys and values ``[B, T, 2,
    kv_heads, hd]``. ``rope``: the positions' turns ``[B, T, 1, hd/2]`` complex64, applied in place in three
    kernels (qkv then holds both outputs), or under torch.compile their parts (cos, sin) apart, applied by
    real arithmetic into new tensors (compile fuses it; it lowers no complex numbers, and an in-place copy
    would compile a batch of one apart from the rest)."""
    qk = qkv[:, :, : heads + kv_heads]
    if isinstance(rope, tuple):
        cos, sin = rope
        even, odd = qk[..., 0::2].float(), qk[..., 1::2].float()  # strided slices: no view of a strided qk
        qk = torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(-2).to(qkv.dtype)
        return qk[:, :, :heads], torch.stack([qk[:, :, heads:], qkv[:, :, heads + kv_heads :]], 2)
    turned = torch.view_as_complex(qk.float().unflatten(-1, (-1, 2))) * rope
    qk.copy_(torch.view_as_real(turned).flatten(-2))
    return qkv[:, :, :heads], qkv[:, :, heads:].unflatten(2, (2, kv_heads))


def _project(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor | None = None, *, skinny: bool = False):
    """``x @ w (+ residual)`` over the last dimension of x ``[..., K]``; returns ``[..., N]``."""
    x2 = x.reshape(-1, x.shape[-1])
    r2 = None if residual is None else residual.reshape(-1, w.shape[1])
    if skinny:
        out = skinny_matmul(x2, w, r2)
    else:
        out = x2 @ w if r2 is None else torch.addmm(r2, x2, w)  # residual add in the GEMM
    return out.view(*x.shape[:-1], w.shape[1])


class _Init:
    def __init__(self, seed: int, device, dtype) -> None:
        dev = torch.device(device)
        self.gen = torch.Generator(device=dev).manual_seed(seed)
        self.device, self.dtype = dev, dtype

    def normal(self, *shape: int, std: float) -> torch.Tensor:
        t = torch.randn(*shape, generator=self.gen, device=self.device, dtype=torch.float32) * std
        return t.to(self.dtype)

    def ones(self, n: int) -> torch.Tensor:
        return torch.ones(n, device=self.device, dtype=self.dtype)


class _Layer:
    """One decoder layer: RMSNorm, GQA attention with RoPE over the static cache, SwiGLU MLP.

    Fused projections (QKV, gate-up), RoPE in place and one cache tensor for K and V keep it to about 19
    kernels with SDPA (on an H100, bf16).
    """

    def __init__(self, cfg: ModelConfig, init: _Init, scale: float, in_features: int | None = None) -> None:
        d, hd = cfg.hidden_size, cfg.head_dim
        std = 1.0 / math.sqrt(d)
        self.cfg = cfg
        self.ln1, self.ln2 = init.ones(d), init.ones(d)
        d_in = in_features or d  # the attention's input: the normed residual, or what attn_in gives
        self.w_qkv = init.normal(d_in, (cfg.num_heads + 2 * cfg.num_kv_heads) * hd, std=1.0 / math.sqrt(d_in))
        self.wo = init.normal(cfg.num_heads * hd, d, std=scale / math.sqrt(cfg.num_heads * hd))
        self.w_gate_up = init.normal(d, 2 * cfg.intermediate_size, std=std)
        self.w_down = init.normal(cfg.intermediate_size, d, std=scale / math.sqrt(cfg.intermediate_size))

    def tensors(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in vars(self).items() if isinstance(v, torch.Tensor)}

    def __call__(self, x, rope, kv: KVCache, kv_cache, where, rows, positions, mask, attn_in=None) -> torch.Tensor:
        cfg = self.cfg
        B, T, _ = x.shape
        H, KVH = cfg.num_heads, cfg.num_kv_heads
        a = _rms_norm(x, self.ln1) if attn_in is None else attn_in
        qkv = _project(a, self.w_qkv).view(B, T, H + 2 * KVH, cfg.head_dim)
        q, new_kv = _rope(qkv, H, KVH, rope)
        kv.write(kv_cache, new_kv, where)
        if mask is None:  # read the rows in place, up to each query's position
            attn = kv.attend(q, kv_cache, rows, positions, cfg.head_dim**-0.5).reshape(B * T, -1)
        else:
            cached = kv.gather(kv_cache, rows)  # [B, 2, KVH, S, hd]
            attn = masked_attention(q.transpose(1, 2), cached[:, 0], cached[:, 1], mask).view(B * T, -1)
        x = _project(attn, self.wo, x).view(B, T, -1)
        gate, up = _project(_rms_norm(x, self.ln2), self.w_gate_up).chunk(2, dim=-1)
        return _project(F.silu(gate) * up, self.w_down, x, skinny=cfg.matmul == "triton")


class _Stack:
    """Embedding-free decoder stack with its own static KV cache and rotary tables.

    The cache is one tensor per layer, ``kv_caches[i]`` (``[max_requests + 1, 2, KVH, S, hd]`` rows, or
    ``[num_pages + 1, 2, KVH, page_size, hd]`` pages), not slices of one tensor: torch.compile then writes
    the new keys and values in place (a write into a slice of a larger input is compiled as a copy of the
    whole tensor).
    """

    def __init__(
        self, cfg: ModelConfig, num_layers: int, init: _Init, kv: KVCache, in_features: int | None = None
    ) -> None:
        self.cfg, self.kv = cfg, kv
        widths = [in_features] + [None] * (num_layers - 1)  # the first layer's attention input width
        self.layers = [_Layer(cfg, init, cfg.residual_scale, w) for w in widths[:num_layers]]
        self.kv_caches = [kv.layer_cache(cfg.num_kv_heads, cfg.head_dim, init.dtype) for _ in range(num_layers)]
        half = torch.arange(0, cfg.head_dim, 2, device=init.device, dtype=torch.float32) / cfg.head_dim
        freqs = torch.arange(cfg.max_seq_len, device=init.device, dtype=torch.float32)[:, None] / cfg.rope_theta**half
        self.cos, self.sin = freqs.cos(), freqs.sin()  # [S, hd/2]
        self.turns = torch.complex(self.cos, self.sin)
        self.key_pos = torch.arange(kv.row_len, device=init.device)

    def __call__(
        self, x: torch.Tensor, positions: torch.Tensor, rows: torch.Tensor, *, attn_in=None, taps: Sequence[int] = ()
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The stack over ``x [B, T, D]``; returns its output and the residual stream entering each layer in
        ``taps``. ``attn_in``: the first layer's attention input, in place of its norm of ``x``."""
        if torch.compiler.is_compiling():
            rope = self.cos[positions][:, :, None, :], self.sin[positions][:, :, None, :]
        else:
            rope = self.turns[positions][:, :, None, :]
        cfg = self.cfg
        if cfg.attention == "triton" and fits(cfg.num_heads, cfg.num_kv_heads, positions.shape[1]):
            mask = None  # decode attention: no mask, no gather
        else:
            # additive, made once: SDPA would turn a boolean mask into this in every layer (three kernels)
            hidden = self.key_pos[None, None, None, :] > positions[:, None, :, None]  # [B, 1, T, S]
            mask = torch.zeros(hidden.shape, device=x.device, dtype=x.dtype).masked_fill_(hidden, float("-inf"))
        where = self.kv.locate(rows, positions)  # the slot mapping, once for every layer
        tapped = []
        for i, (layer, kv_cache) in enumerate(zip(self.layers, self.kv_caches)):
            tapped += [x] * taps.count(i)
            x = layer(x, rope, self.kv, kv_cache, where, rows, positions, mask, attn_in if i == 0 else None)
        return x, tapped


class ExampleTarget:
    """The target: ``target(tokens, positions, cache_rows) -> (logits, hidden)``.

    Shapes: tokens/positions ``[B, T]`` int64, cache_rows ``[B]`` int64 (``cfg.scratch_row`` for padding);
    returns logits ``[B, T, V]`` and the final hidden states (before the last norm) ``[B, T, D]``, or
    with ``taps`` (layer ids) the residual stream entering each of those layers side by side, ``[B, T,
    len(taps) * D]`` (what an EAGLE-3 head reads: :class:`Eagle3Head`).
    CUDA graph: safe (static cache, fixed shapes, no host syncs). ``kv``: the cache to share (a draft
    model over the target's block table); by default the one ``cfg`` asks for (:func:`config_kv`).
    """

    def __init__(
        self,
        cfg: ModelConfig = ModelConfig(),
        *,
        device="cpu",
        dtype=torch.float32,
        kv: KVCache | None = None,
        taps: Sequence[int] = (),
    ) -> None:
        if cfg.attention == "triton" and torch.device(device).type != "cuda" and not triton_interprets():
            raise ValueError(
                "attention='triton' runs Triton kernels: build on a CUDA device, or set TRITON_INTERPRET=1 to "
                "run them through Triton's CPU interpreter (slow), or use attention='sdpa'"
            )
        init = _Init(cfg.seed, device, dtype)
        self.cfg, self.device, self.dtype = cfg, torch.device(device), dtype
        self.embed = init.normal(cfg.vocab_size, cfg.hidden_size, std=1.0)
        self.lm_head = init.normal(cfg.hidden_size, cfg.vocab_size, std=1.0 / math.sqrt(cfg.hidden_size))
        self.norm = init.ones(cfg.hidden_size)
        self.kv = config_kv(cfg, device) if kv is None else kv
        self.stack = _Stack(cfg, cfg.num_layers, init, self.kv)
        if not all(isinstance(i, int) and 0 <= i < cfg.num_layers for i in taps):
            raise ValueError(f"taps {tuple(taps)} must be layer ids in 0..{cfg.num_layers - 1}")
        self.taps = tuple(taps)

    @property
    def vocab_size(self) -> int:
        return self.cfg.vocab_size

    @property
    def hidden_size(self) -> int:
        """The width of the hidden state handed out (``len(taps) * D`` with taps)."""
        return self.cfg.hidden_size * (len(self.taps) or 1)

    @property
    def scratch_row(self) -> int:
        return self.cfg.scratch_row

    def __call__(self, tokens, positions, cache_rows):
        x, tapped = self.stack(self.embed[tokens], positions, cache_rows, taps=self.taps)
        return _rms_norm(x, self.norm) @ self.lm_head, torch.cat(tapped, -1) if self.taps else x

    def weights(self) -> dict[str, torch.Tensor]:
        out = {"embed": self.embed, "lm_head": self.lm_head, "norm": self.norm}
        for i, layer in enumerate(self.stack.layers):
            out.update({f"layers.{i}.{k}": v for k, v in layer.tensors().items()})
        return out


class EagleDraft:
    """EAGLE-style draft head: one decoder layer over ``fc([embed(token), feature])``.

    ``draft(tokens, positions, hidden, cache_rows) -> (logits, hidden_out)``: ``hidden`` is the feature of
    the previous position (the target's, or the draft's own while drafting). Shares the target's
    embedding and LM head. Shapes as :class:`ExampleTarget`, hidden ``[B, T, D]``.
    """

    def __init__(self, target: ExampleTarget, *, seed: int | None = None) -> None:
        cfg = replace(target.cfg, seed=target.cfg.seed + 1 if seed is None else seed)
        init = _Init(cfg.seed, target.device, target.dtype)
        d = cfg.hidden_size
        self.cfg, self.target = cfg, target
        # fc starts near "take the token's embedding": the head then predicts what the target predicts
        eye = torch.eye(d, device=init.device, dtype=torch.float32)
        fc = torch.cat([eye, torch.zeros(d, d, device=init.device)], 0) + init.normal(2 * d, d, std=0.02).float()
        self.fc = fc.to(target.dtype)
        self.norm = init.ones(d)
        self.kv = target.kv
        self.stack = _Stack(cfg, 1, init, target.kv)

    @property
    def hidden_size(self) -> int:
        return self.cfg.hidden_size

    def __call__(self, tokens, positions, hidden, cache_rows):
        x = torch.cat([self.target.embed[tokens], hidden.to(self.target.dtype)], -1) @ self.fc
        x, _ = self.stack(x, positions, cache_rows)
        return _rms_norm(x, self.norm) @ self.target.lm_head, x


class MtpHead(EagleDraft):
    """DeepSeek-V3-style MTP head (random weights): one decoder layer over ``eh_proj(cat(enorm(embed(token)),
    hnorm(hidden)))``, then its own norm and the target's LM head (the ``shared_head``). ``hidden`` is the
    target's final state before its norm, then the layer's own output while drafting (see
    :mod:`stepgraph.drafts.mtp` for the trained format). Shapes as :class:`EagleDraft`."""

    def __init__(self, target: ExampleTarget, *, seed: int | None = None) -> None:
        super().__init__(target, seed=seed)
        d = self.cfg.hidden_size
        init = _Init(self.cfg.seed + 7, target.device, target.dtype)
        self.enorm, self.hnorm = init.ones(d), init.ones(d)
        self.fc = init.normal(2 * d, d, std=1.0 / math.sqrt(2 * d))  # eh_proj

    def __call__(self, tokens, positions, hidden, cache_rows):
        e = _rms_norm(self.target.embed[tokens], self.enorm)
        x = torch.cat([e, _rms_norm(hidden.to(self.target.dtype), self.hnorm)], -1) @ self.fc
        x, _ = self.stack(x, positions, cache_rows)
        return _rms_norm(x, self.norm) @ self.target.lm_head, x


def eagle3_taps(num_layers: int) -> tuple[int, int, int]:
    """EAGLE-3's default taps, ``(2, L // 2, L - 3)``, clamped into ``0..L-1`` for shallow models."""
    return tuple(min(max(i, 0), num_layers - 1) for i in (2, num_layers // 2, num_layers - 3))


class Eagle3Head:
    """EAGLE-3-style draft head (random weights) for a target built with three ``taps``: ``fc`` over the
    three tapped states, one layer over ``cat(norm(embed(token)), norm(h))`` with residual ``h``, and logits
    over a draft vocabulary of ``draft_vocab`` target ids (``-inf`` elsewhere). Later draft steps feed the
    layer's pre-norm output back as ``h`` (see :mod:`stepgraph.drafts.eagle` for the trained format).

    ``draft(tokens, positions, hidden [B, T, 3D or D], cache_rows) -> (logits [B, T, V], hidden [B, T, D])``.
    """

    def __init__(self, target: ExampleTarget, *, draft_vocab: int | None = None, seed: int | None = None) -> None:
        if len(target.taps) != 3:
            raise ValueError(f"an EAGLE-3 head reads three target layers; the target has taps {target.taps}")
        cfg = replace(target.cfg, seed=target.cfg.seed + 1 if seed is None else seed)
        init = _Init(cfg.seed, target.device, target.dtype)
        d, V = cfg.hidden_size, cfg.vocab_size
        vd = min(32000, V // 4) if draft_vocab is None else draft_vocab
        self.cfg, self.target = cfg, target
        self.fc = init.normal(3 * d, d, std=1.0 / math.sqrt(3 * d))
        self.input_norm, self.hidden_norm, self.norm = init.ones(d), init.ones(d), init.ones(d)
        self.lm_head = init.normal(d, vd, std=1.0 / math.sqrt(d))
        order = torch.randperm(V, generator=torch.Generator().manual_seed(cfg.seed))[:vd]
        self.targets = torch.sort(order).values.to(target.device)  # the draft vocabulary's target ids
        self.stack = _Stack(cfg, 1, init, target.kv, in_features=2 * d)

    @property
    def hidden_size(self) -> int:
        return self.cfg.hidden_size

    def __call__(self, tokens, positions, hidden, cache_rows):
        hidden = hidden.to(self.target.dtype)
        h = hidden @ self.fc if hidden.shape[-1] == self.fc.shape[0] else hidden
        attn_in = torch.cat([_rms_norm(self.target.embed[tokens], self.input_norm), _rms_norm(h, self.hidden_norm)], -1)
        x, _ = self.stack(h, positions, cache_rows, attn_in=attn_in)
        draft_logits = _rms_norm(x, self.norm) @ self.lm_head
        logits = draft_logits.new_full((*tokens.shape, self.cfg.vocab_size), float("-inf"))
        logits[..., self.targets] = draft_logits
        return logits, x


class ModelDraft:
    """A plain draft model: any target-like model used as the draft (ignores the hidden states).

    ``ModelDraft(ExampleTarget(cfg))`` with the target's config is a draft identical to the target: it
    accepts all K tokens (a check of the accept-length bookkeeping).
    """

    def __init__(self, model: ExampleTarget) -> None:
        self.model = model

    @property
    def hidden_size(self) -> int:
        return self.model.hidden_size

    def __call__(self, tokens, positions, hidden, cache_rows):
        return self.model(tokens, positions, cache_rows)


class TwinDraft:
    """A copy of the target whose proposals agree with the target's at a chosen rate: a draft with
    controllable acceptance, so that benchmarks can sweep it (random weights give an EAGLE head almost no
    acceptance, and an exact twin accepts everything).

    Each proposal (the argmax at a position) is kept with probability ``acceptance`` and otherwise moved to
    another token, decided by a hash of the position and the input token: deterministic, graph-safe, the
    same in every run. Shapes as :class:`ModelDraft`.
    """

    def __init__(self, model: ExampleTarget, acceptance: float, *, seed: int = 0) -> None:
        if not 0.0 <= acceptance <= 1.0:
            raise ValueError(f"acceptance must be in [0, 1], got {acceptance}")
        self.model, self.acceptance, self.seed = model, float(acceptance), seed

    @property
    def hidden_size(self) -> int:
        return self.model.hidden_size

    def __call__(self, tokens, positions, hidden, cache_rows):
        logits, out = self.model(tokens, positions, cache_rows)
        V = logits.shape[-1]
        h = (positions * 0x9E3779B1 + tokens * 0x85EBCA77 + self.seed) & 0x7FFFFFFF
        for mult in (0x2C1B3C6D, 0x297A2D39):  # xor-shift-multiply rounds (31-bit: no int64 overflow)
            h = ((h ^ (h >> 15)) * mult) & 0x7FFFFFFF
        h = h ^ (h >> 15)  # [B, T] in [0, 2^31)
        moved = h.double() * (1.0 / 2**31) >= self.acceptance  # [B, T]
        other = (logits.argmax(-1) + 1 + (h >> 8) % max(V - 1, 1)) % V  # never the argmax itself
        bump = torch.zeros_like(logits).scatter_(-1, other[..., None], 1e4)
        return torch.where(moved[..., None], logits + bump, logits), out


def build(preset: str = "tiny", *, device="cpu", dtype=torch.float32, draft: str = "eagle", **overrides):
    """``(target, draft)`` for a preset (``tiny`` or ``qwen3-0.6b``) with config ``overrides``.

    ``draft``: ``"eagle"`` (an EAGLE head), ``"eagle3"`` (an EAGLE-3 head, the target tapped at three
    layers: :class:`Eagle3Head`), ``"mtp"`` (a DeepSeek-style MTP head: :class:`MtpHead`), ``"same"`` (a
    copy of the target: accepts everything),
    ``"twin:A"`` (a copy whose proposals agree with the target's at rate ``A`` in [0, 1]:
    :class:`TwinDraft`) or ``"ngram"`` (prompt lookup, no draft model: :class:`~stepgraph.drafts.PromptLookupDraft`).
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
    cfg = replace(PRESETS[preset], **overrides)
    if draft == "eagle3":
        target = ExampleTarget(cfg, device=device, dtype=dtype, taps=eagle3_taps(cfg.num_layers))
        return target, Eagle3Head(target)
    target = ExampleTarget(cfg, device=device, dtype=dtype)
    if draft == "eagle":
        return target, EagleDraft(target)
    if draft == "mtp":
        return target, MtpHead(target)
    if draft == "ngram":
        from stepgraph.drafts import PromptLookupDraft

        return target, PromptLookupDraft.for_example(target)
    if draft == "same":
        return target, ModelDraft(ExampleTarget(cfg, device=device, dtype=dtype, kv=target.kv))
    if draft.startswith("twin:"):
        try:
            acceptance = float(draft.removeprefix("twin:"))
        except ValueError:
            raise ValueError(f"draft {draft!r}: give twin:A with A an acceptance in [0, 1], e.g. twin:0.6") from None
        return target, TwinDraft(ExampleTarget(cfg, device=device, dtype=dtype, kv=target.kv), acceptance)
    raise ValueError(
        f"draft must be 'eagle', 'eagle3', 'mtp', 'same', 'ngram' or 'twin:A' (A in [0, 1]), got {draft!r}"
    )


def greedy_reference(
    target: ExampleTarget, prompt: list[int], max_new_tokens: int, *, eos: int | None = None
) -> list[int]:
    """Plain greedy decoding of the target alone (no speculation), one token per forward, in a cache row
    taken from the target's cache for the call (none may be held by a running decoder's request)."""
    dev = target.device
    n = len(prompt) + max_new_tokens
    row = target.kv.admit(n, n)
    try:
        rows = torch.tensor([row], device=dev)
        logits, _ = target(torch.tensor([prompt], device=dev), torch.arange(len(prompt), device=dev)[None], rows)
        out = [int(torch.argmax(logits[0, -1]))]
        pos = len(prompt)
        while len(out) < max_new_tokens and (eos is None or out[-1] != eos):
            logits, _ = target(torch.tensor([[out[-1]]], device=dev), torch.tensor([[pos]], device=dev), rows)
            out.append(int(torch.argmax(logits[0, -1])))
            pos += 1
    finally:
        target.kv.release(row)
    return out
