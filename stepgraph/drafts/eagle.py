"""Trained EAGLE heads from their checkpoints, as graph-safe drafts for a Hugging Face target: EAGLE-3 (the
format of SafeAILab's EAGLE-3 and SpecForge, which vLLM and SGLang load) and EAGLE-1/2 (SafeAILab's).

A checkpoint directory holds ``config.json`` (a Llama config with ``num_hidden_layers: 1``) and the
weights (``*.safetensors`` or ``pytorch_model.bin``, under a ``model.`` prefix or not). :func:`load_eagle`
tells the two formats apart by their ``fc``.

**EAGLE-3**: ``fc [H, 3 Ht]``, ``midlayer.*`` (or ``layers.0.*``: ``self_attn.{q,k,v,o}_proj`` with q, k
and v over ``2 H`` inputs, ``mlp.{gate,up,down}_proj``, ``input_layernorm``, ``hidden_norm``,
``post_attention_layernorm``), ``norm``, ``lm_head [Vd, H]`` and ``d2t [Vd]``; config fields
``draft_vocab_size``, and optionally ``target_hidden_size``,
``eagle_config.eagle_aux_hidden_state_layer_ids``, ``norm_before_residual`` and ``bias``. Per position,
as vLLM's ``llama_eagle3``:

* the feature ``h`` is ``fc(cat(low, mid, high))`` where the target's three tapped states come in (the
  verify's positions and the prompt), else the previous draft step's pre-norm output;
* the layer reads ``cat(input_layernorm(embed(token)), hidden_norm(h))`` with residual ``h`` (or
  ``hidden_norm(h)`` with ``norm_before_residual``);
* logits are ``lm_head(norm(out))`` over the draft vocabulary, placed at the target ids
  ``draft_id + d2t[draft_id]`` of a target-wide row that is ``-inf`` elsewhere; the next feature is
  the pre-norm ``out``.

Taps: layer id ``i`` is the residual stream *entering* target layer ``i`` (vLLM's convention, which
takes the config's ids as given; SGLang adds one to them). Default ``(2, L // 2, L - 3)``.

**EAGLE-1/2**: ``fc [H, 2 H]`` (with its bias where the checkpoint has one) and ``layers.0.*`` without an
input layernorm; no final norm and no head of its own. Per position, as SafeAILab's ``cnets.py`` and
vLLM's ``llama_eagle``: ``h = fc(cat(embed(token), hidden))`` at every step, with ``hidden`` the target's
final (post-norm) hidden state or the previous draft step's output; the layer reads ``h`` with residual
``h``; logits are the target's head over ``out``, the next feature.

Either way ``embed_tokens`` is the target's where the checkpoint has none, ``t2d`` (training only) is
ignored, and the head keeps its own KV cache.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as transformers' Llama computes it (in float32, scaled in the input's dtype)."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


class _Layer:
    """The head's decoder layer over its own KV cache (``num_rows`` rows of ``max_seq_len`` positions):
    ``layer(x [B, T, Din], residual [B, T, H], positions, cache_rows) -> [B, T, H]``, the attention input
    ``x`` already normalised as the format wants."""

    def __init__(self, config: dict, weights: dict, *, num_rows: int, max_seq_len: int, dtype, device) -> None:
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        self.w, self.eps = weights, float(config.get("rms_norm_eps", 1e-6))
        H = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.kv_heads = int(config.get("num_key_value_heads") or self.heads)
        self.head_dim = int(config.get("head_dim") or H // self.heads)
        rope = {k: v for k, v in config.items() if k in ("rope_theta", "rope_scaling", "max_position_embeddings")}
        rope_config = LlamaConfig(hidden_size=H, num_attention_heads=self.heads, head_dim=self.head_dim, **rope)
        self.rotary = LlamaRotaryEmbedding(config=rope_config).to(device)
        self.max_seq_len = max_seq_len
        shape = (num_rows, max_seq_len, self.kv_heads, self.head_dim)
        self.k_cache = torch.zeros(shape, dtype=dtype, device=device)
        self.v_cache = torch.zeros(shape, dtype=dtype, device=device)
        self.key_pos = torch.arange(max_seq_len, device=device)

    def linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, self.w[name + ".weight"], self.w.get(name + ".bias"))

    def __call__(self, x, residual, positions, cache_rows):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        B, T = positions.shape
        q = self.linear(x, "midlayer.self_attn.q_proj").view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k = self.linear(x, "midlayer.self_attn.k_proj").view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.linear(x, "midlayer.self_attn.v_proj").view(B, T, self.kv_heads, self.head_dim)
        at = positions.clamp(0, self.max_seq_len - 1)
        cos, sin = self.rotary(v, at)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        rows = cache_rows[:, None].expand(B, T)
        self.k_cache[rows, at] = k.transpose(1, 2)
        self.v_cache[rows, at] = v
        keys = self.k_cache[cache_rows].transpose(1, 2)  # [B, kv_heads, S, hd]
        values = self.v_cache[cache_rows].transpose(1, 2)
        mask = self.key_pos[None, None, None, :] <= at[:, None, :, None]  # [B, 1, T, S]
        attn = F.scaled_dot_product_attention(
            q, keys, values, attn_mask=mask, scale=1.0 / math.sqrt(self.head_dim), enable_gqa=True
        )
        h = residual + self.linear(attn.transpose(1, 2).reshape(B, T, -1), "midlayer.self_attn.o_proj")
        m = _rms(h, self.w["midlayer.post_attention_layernorm.weight"], self.eps)
        up = F.silu(self.linear(m, "midlayer.mlp.gate_proj")) * self.linear(m, "midlayer.mlp.up_proj")
        return h + self.linear(up, "midlayer.mlp.down_proj")


class Eagle3Draft:
    """``draft(tokens [B, T], positions [B, T], hidden [B, T, 3 Ht or H], cache_rows [B]) -> (logits [B, T,
    V], hidden [B, T, H])``: an EAGLE-3 head (module docstring). Build one with :func:`load_eagle`.

    ``taps``: the target layers whose input it reads (give them to the target: ``hf_spec_decoder`` does).
    """

    def __init__(self, config: dict, weights: dict, embed: torch.Tensor, *, taps, vocab_size: int, **cache) -> None:
        self.w, self.embed, self.taps, self.vocab_size = weights, embed, tuple(taps), vocab_size
        self.hidden_size = int(config["hidden_size"])
        self.eps = float(config.get("rms_norm_eps", 1e-6))
        self.norm_before_residual = bool(config.get("norm_before_residual", False))
        self.fc_in = weights["fc.weight"].shape[1]
        self.device, self.dtype = embed.device, embed.dtype
        self.num_rows, self.max_seq_len = cache["num_rows"], cache["max_seq_len"]
        self.layer = _Layer(config, weights, dtype=self.dtype, device=self.device, **cache)
        self.targets = torch.arange(weights["d2t"].shape[0], device=self.device) + weights["d2t"]

    def __call__(self, tokens, positions, hidden, cache_rows):
        B, T = tokens.shape
        hidden = hidden.to(self.dtype)
        h = self.layer.linear(hidden, "fc") if hidden.shape[-1] == self.fc_in else hidden
        normed = _rms(h, self.w["midlayer.hidden_norm.weight"], self.eps)
        residual = normed if self.norm_before_residual else h
        e = _rms(F.embedding(tokens, self.embed), self.w["midlayer.input_layernorm.weight"], self.eps)
        out = self.layer(torch.cat([e, normed], -1), residual, positions, cache_rows)  # the pre-norm output
        draft_logits = F.linear(_rms(out, self.w["norm.weight"], self.eps), self.w["lm_head.weight"])
        logits = draft_logits.new_full((B, T, self.vocab_size), float("-inf"))
        logits[..., self.targets] = draft_logits
        return logits, out


class EagleDraft:
    """``draft(tokens [B, T], positions [B, T], hidden [B, T, H], cache_rows [B]) -> (logits [B, T, V], hidden
    [B, T, H])``: an EAGLE-1/2 head (module docstring) over the target's head ``lm_head`` (a module).
    Build one with :func:`load_eagle`."""

    taps = None

    def __init__(self, config: dict, weights: dict, embed: torch.Tensor, *, lm_head, **cache) -> None:
        self.w, self.embed = weights, embed
        bias = getattr(lm_head, "bias", None)
        self.head = (lm_head.weight.detach(), None if bias is None else bias.detach())
        self.hidden_size = int(config["hidden_size"])
        self.device, self.dtype = embed.device, embed.dtype
        self.num_rows, self.max_seq_len = cache["num_rows"], cache["max_seq_len"]
        self.layer = _Layer(config, weights, dtype=self.dtype, device=self.device, **cache)

    def __call__(self, tokens, positions, hidden, cache_rows):
        h = self.layer.linear(torch.cat([F.embedding(tokens, self.embed), hidden.to(self.dtype)], -1), "fc")
        out = self.layer(h, h, positions, cache_rows)
        return F.linear(out, *self.head), out


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    files = sorted(path.glob("*.safetensors"))
    if files:
        from safetensors.torch import load_file

        weights = {}
        for f in files:
            weights.update(load_file(f))
    elif (path / "pytorch_model.bin").exists():
        weights = torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)
    else:
        raise FileNotFoundError(f"{path} has no *.safetensors and no pytorch_model.bin: not an EAGLE checkpoint")
    out = {}
    for name, t in weights.items():
        name = name.removeprefix("model.")
        out[name.replace("layers.0.", "midlayer.", 1) if name.startswith("layers.0.") else name] = t
    return out


def _check(path: Path, weights: dict, expected: dict, prefix: str = "") -> None:
    """Each tensor of ``expected`` (name -> shape) in ``weights``, of that shape; ``prefix``: the names'
    prefix in the checkpoint, for the messages."""
    for name, shape in expected.items():
        if name not in weights:
            raise ValueError(f"{path}: no tensor {prefix}{name} (expected shape {list(shape)})")
        if tuple(weights[name].shape) != shape:
            raise ValueError(f"{path}: {prefix}{name} has shape {list(weights[name].shape)}, expected {list(shape)}")


def load_eagle(
    path: str | Path, target_model, *, max_requests: int = 8, max_seq_len: int = 512
) -> Eagle3Draft | EagleDraft:
    """The EAGLE-3 or EAGLE-1/2 head in checkpoint directory ``path`` (module docstring), for the Hugging
    Face causal LM ``target_model``: its weights in the target's dtype and device, the target's embedding
    where the checkpoint has none, a KV cache of ``max_requests + 1`` rows of ``max_seq_len`` positions.
    Pass it as ``hf_spec_decoder``'s draft, with the same sizes; for an EAGLE-3 head the adapter taps the
    target at ``draft.taps``.

    Raises
    ------
    ValueError
        For a checkpoint that does not fit the target, naming the tensor or field and the shapes expected:
        hidden sizes, vocabularies, a missing or misshapen tensor, taps outside the target's layers.
    FileNotFoundError
        For a directory without weights.
    """
    path = Path(path)
    config = json.loads((path / "config.json").read_text())
    missing = [f for f in ("hidden_size", "num_attention_heads", "intermediate_size") if f not in config]
    if missing:
        raise ValueError(f"{path}/config.json has no {', '.join(missing)}: not an EAGLE head's config")
    tc = target_model.config
    H, V, L = int(config["hidden_size"]), tc.vocab_size, tc.num_hidden_layers
    if config.get("vocab_size", V) != V:
        raise ValueError(
            f"{path}: the head's vocab_size is {config['vocab_size']}, the target's {V}: not this target's head"
        )
    if int(config.get("num_hidden_layers", 1)) != 1:
        raise ValueError(f"{path}: {config['num_hidden_layers']} layers; stepgraph loads EAGLE heads of one layer")
    param = next(target_model.parameters())
    weights = {n: t.to(param.device) for n, t in _read_weights(path).items() if n != "t2d"}
    if "fc.weight" not in weights:
        raise ValueError(f"{path}: no tensor fc.weight: not an EAGLE head")
    three = weights["fc.weight"].shape[-1] != 2 * H  # EAGLE-3 reads three target states, EAGLE-1/2 embed + one
    Ht = int(config.get("target_hidden_size") or H)
    if Ht != tc.hidden_size or (not three and tc.hidden_size != H):
        raise ValueError(
            f"{path}: the head reads hidden states of {Ht} (target_hidden_size), the target's are {tc.hidden_size}"
        )
    embed = weights.pop("embed_tokens.weight", None)
    embed = (target_model.get_input_embeddings().weight if embed is None else embed).detach()
    if tuple(embed.shape) != (V, H):
        raise ValueError(f"embed_tokens has shape {list(embed.shape)}, expected [{V}, {H}] (the target's vocabulary)")
    heads = int(config["num_attention_heads"])
    kv, hd = int(config.get("num_key_value_heads") or heads), int(config.get("head_dim") or H // heads)
    inter, d_in = int(config["intermediate_size"]), 2 * H if three else H
    expected = {
        "fc.weight": (H, 3 * Ht) if three else (H, 2 * H),
        "midlayer.self_attn.q_proj.weight": (heads * hd, d_in),
        "midlayer.self_attn.k_proj.weight": (kv * hd, d_in),
        "midlayer.self_attn.v_proj.weight": (kv * hd, d_in),
        "midlayer.self_attn.o_proj.weight": (H, heads * hd),
        "midlayer.mlp.gate_proj.weight": (inter, H),
        "midlayer.mlp.up_proj.weight": (inter, H),
        "midlayer.mlp.down_proj.weight": (H, inter),
        "midlayer.post_attention_layernorm.weight": (H,),
    }
    if bool(config.get("bias", False) or config.get("attention_bias", False)) and three:
        widths = {"q": heads * hd, "k": kv * hd, "v": kv * hd}
        expected |= {f"midlayer.self_attn.{p}_proj.bias": (n,) for p, n in widths.items()}
    cache = {"num_rows": max_requests + 1, "max_seq_len": max_seq_len}
    if not three:
        _check(path, weights, expected)
        weights = {n: t.to(param.dtype) for n, t in weights.items()}
        head = target_model.get_output_embeddings()
        return EagleDraft(config, weights, embed.to(param.dtype), lm_head=head, **cache)
    ids = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    taps = tuple(ids) if ids else (2, L // 2, L - 3)
    if len(taps) != 3 or not all(isinstance(i, int) and 0 <= i < L for i in taps):
        raise ValueError(f"{path}: taps {taps} must be three layer ids of the target's 0..{L - 1}")
    Vd = int(config.get("draft_vocab_size") or V)
    expected |= {
        "midlayer.input_layernorm.weight": (H,),
        "midlayer.hidden_norm.weight": (H,),
        "norm.weight": (H,),
        "lm_head.weight": (Vd, H),
        "d2t": (Vd,),
    }
    _check(path, weights, expected)
    targets = torch.arange(Vd, device=param.device) + weights["d2t"].long()
    if not (int(targets.min()) >= 0 and int(targets.max()) < V):
        raise ValueError(f"{path}: d2t maps draft ids outside the target's vocabulary [0, {V})")
    weights = {n: (t.long() if n == "d2t" else t.to(param.dtype)) for n, t in weights.items()}
    return Eagle3Draft(config, weights, embed.to(param.dtype), taps=taps, vocab_size=V, **cache)
