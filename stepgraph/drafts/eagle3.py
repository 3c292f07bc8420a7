"""EAGLE-3 heads from their checkpoints (the format of SafeAILab's EAGLE-3, SpecForge, and what vLLM and
SGLang load), as a graph-safe draft for a Hugging Face target.

A checkpoint directory holds ``config.json`` (a Llama config with ``num_hidden_layers: 1``,
``draft_vocab_size``, optionally ``target_hidden_size``, ``eagle_config.eagle_aux_hidden_state_layer_ids``,
``norm_before_residual``, ``bias``) and the weights (``*.safetensors`` or ``pytorch_model.bin``):
``fc [H, 3 Ht]``, ``midlayer.self_attn.{q,k,v,o}_proj`` (q, k and v over ``2 H`` inputs),
``midlayer.mlp.{gate,up,down}_proj``, ``midlayer.{input_layernorm, hidden_norm,
post_attention_layernorm}``, ``norm``, ``lm_head [Vd, H]`` and ``d2t [Vd]``; ``embed_tokens`` is taken
from the target where the checkpoint has none, and ``t2d`` (training only) is ignored.

The forward, per position, as vLLM's ``llama_eagle3``:

* the feature ``h`` is ``fc(cat(low, mid, high))`` where the target's three tapped states come in (the
  verify's positions and the prompt), else the previous draft step's pre-norm output;
* the layer reads ``cat(input_layernorm(embed(token)), hidden_norm(h))`` with residual ``h`` (or
  ``hidden_norm(h)`` with ``norm_before_residual``); attention over the head's own cache, then the MLP;
* logits are ``lm_head(norm(out))`` over the draft vocabulary, placed at the target ids
  ``draft_id + d2t[draft_id]`` of a target-wide row that is ``-inf`` elsewhere; the next feature is the
  pre-norm ``out``.

Taps: layer id ``i`` is the residual stream *entering* target layer ``i`` (vLLM's convention, which
takes the config's ids as given; SGLang adds one to them). Default ``(2, L // 2, L - 3)``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as transformers' Llama computes it (in float32, scaled in the input's dtype)."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


class Eagle3Draft:
    """``draft(tokens [B, T], positions [B, T], hidden [B, T, 3 Ht or H], cache_rows [B]) -> (logits [B, T,
    V], hidden [B, T, H])``: an EAGLE-3 head with its own KV cache of ``num_rows`` rows (the scratch row
    last) of ``max_seq_len`` positions. Build one with :func:`load_eagle3`.

    ``taps``: the target layers whose input it reads (give them to the target: ``hf_spec_decoder`` does).
    """

    def __init__(
        self,
        config: dict,
        weights: dict[str, torch.Tensor],
        embed: torch.Tensor,
        *,
        taps: Sequence[int],
        vocab_size: int,
        num_rows: int,
        max_seq_len: int,
    ) -> None:
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        self.w, self.embed, self.taps = weights, embed, tuple(taps)
        self.hidden_size = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.kv_heads = int(config.get("num_key_value_heads") or self.heads)
        self.head_dim = int(config.get("head_dim") or self.hidden_size // self.heads)
        self.eps = float(config.get("rms_norm_eps", 1e-6))
        self.norm_before_residual = bool(config.get("norm_before_residual", False))
        self.fc_in = weights["fc.weight"].shape[1]
        self.vocab_size, self.num_rows, self.max_seq_len = vocab_size, num_rows, max_seq_len
        dev, self.dtype = embed.device, embed.dtype
        self.device = dev
        rope = {k: v for k, v in config.items() if k in ("rope_theta", "rope_scaling", "max_position_embeddings")}
        rope_config = LlamaConfig(
            hidden_size=self.hidden_size, num_attention_heads=self.heads, head_dim=self.head_dim, **rope
        )
        self.rotary = LlamaRotaryEmbedding(config=rope_config).to(dev)
        shape = (num_rows, max_seq_len, self.kv_heads, self.head_dim)
        self.k_cache = torch.zeros(shape, dtype=self.dtype, device=dev)
        self.v_cache = torch.zeros(shape, dtype=self.dtype, device=dev)
        self.targets = torch.arange(weights["d2t"].shape[0], device=dev) + weights["d2t"].to(dev)
        self.key_pos = torch.arange(max_seq_len, device=dev)

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.linear(x, self.w[name + ".weight"], self.w.get(name + ".bias"))

    def __call__(self, tokens, positions, hidden, cache_rows):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        B, T = tokens.shape
        h = self._linear(hidden.to(self.dtype), "fc") if hidden.shape[-1] == self.fc_in else hidden.to(self.dtype)
        normed = _rms(h, self.w["midlayer.hidden_norm.weight"], self.eps)
        residual = normed if self.norm_before_residual else h
        e = _rms(F.embedding(tokens, self.embed), self.w["midlayer.input_layernorm.weight"], self.eps)
        x = torch.cat([e, normed], -1)  # [B, T, 2H]
        q = self._linear(x, "midlayer.self_attn.q_proj").view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k = self._linear(x, "midlayer.self_attn.k_proj").view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self._linear(x, "midlayer.self_attn.v_proj").view(B, T, self.kv_heads, self.head_dim)
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
        h1 = residual + self._linear(attn.transpose(1, 2).reshape(B, T, -1), "midlayer.self_attn.o_proj")
        m = _rms(h1, self.w["midlayer.post_attention_layernorm.weight"], self.eps)
        up = F.silu(self._linear(m, "midlayer.mlp.gate_proj")) * self._linear(m, "midlayer.mlp.up_proj")
        out = h1 + self._linear(up, "midlayer.mlp.down_proj")  # the pre-norm output: the next feature
        draft_logits = F.linear(_rms(out, self.w["norm.weight"], self.eps), self.w["lm_head.weight"])
        logits = draft_logits.new_full((B, T, self.vocab_size), float("-inf"))
        logits[..., self.targets] = draft_logits
        return logits, out


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
        raise FileNotFoundError(f"{path} has no *.safetensors and no pytorch_model.bin: not an EAGLE-3 checkpoint")
    out = {}
    for name, t in weights.items():
        name = name.removeprefix("model.")
        out[name.replace("layers.0.", "midlayer.", 1) if name.startswith("layers.0.") else name] = t
    return out


def load_eagle3(path: str | Path, target_model, *, max_requests: int = 8, max_seq_len: int = 512) -> Eagle3Draft:
    """The EAGLE-3 head in checkpoint directory ``path`` (module docstring), for the Hugging Face causal
    LM ``target_model``: its weights in the target's dtype and device, the target's embedding where the
    checkpoint has none, a KV cache of ``max_requests + 1`` rows of ``max_seq_len`` positions. Pass it as
    ``hf_spec_decoder``'s draft (with the same sizes): the adapter taps the target at ``draft.taps``.

    Raises
    ------
    ValueError
        For a checkpoint that does not fit the target, naming the tensor or field and the shapes expected:
        hidden sizes, vocabularies, a missing or misshapen tensor, taps outside the target's layers.
    """
    path = Path(path)
    config = json.loads((path / "config.json").read_text())
    missing = [f for f in ("hidden_size", "num_attention_heads", "intermediate_size") if f not in config]
    if missing:
        raise ValueError(f"{path}/config.json has no {', '.join(missing)}: not an EAGLE-3 head's config")
    tc = target_model.config
    H, Ht, V = int(config["hidden_size"]), int(config.get("target_hidden_size") or config["hidden_size"]), tc.vocab_size
    Vd = int(config.get("draft_vocab_size") or config.get("vocab_size") or V)
    if Ht != tc.hidden_size:
        raise ValueError(
            f"{path}: the head reads hidden states of {Ht} (target_hidden_size), the target's are {tc.hidden_size}"
        )
    if config.get("vocab_size", V) != V:
        raise ValueError(
            f"{path}: the head's vocab_size is {config['vocab_size']}, the target's {V}: not this target's head"
        )
    if int(config.get("num_hidden_layers", 1)) != 1:
        raise ValueError(f"{path}: {config['num_hidden_layers']} layers; stepgraph loads EAGLE-3 heads of one layer")
    L = tc.num_hidden_layers
    ids = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    taps = tuple(ids) if ids else (2, L // 2, L - 3)
    if len(taps) != 3 or not all(isinstance(i, int) and 0 <= i < L for i in taps):
        raise ValueError(f"{path}: taps {taps} must be three layer ids of the target's 0..{L - 1}")
    param = next(target_model.parameters())
    weights = {n: t.to(param.device) for n, t in _read_weights(path).items() if n != "t2d"}
    embed = weights.pop("embed_tokens.weight", None)
    embed = target_model.get_input_embeddings().weight if embed is None else embed
    heads = int(config["num_attention_heads"])
    kv, hd = int(config.get("num_key_value_heads") or heads), int(config.get("head_dim") or H // heads)
    inter = int(config["intermediate_size"])
    bias = bool(config.get("bias", False) or config.get("attention_bias", False))
    expected = {
        "fc.weight": (H, 3 * Ht),
        "midlayer.self_attn.q_proj.weight": (heads * hd, 2 * H),
        "midlayer.self_attn.k_proj.weight": (kv * hd, 2 * H),
        "midlayer.self_attn.v_proj.weight": (kv * hd, 2 * H),
        "midlayer.self_attn.o_proj.weight": (H, heads * hd),
        "midlayer.mlp.gate_proj.weight": (inter, H),
        "midlayer.mlp.up_proj.weight": (inter, H),
        "midlayer.mlp.down_proj.weight": (H, inter),
        "midlayer.input_layernorm.weight": (H,),
        "midlayer.hidden_norm.weight": (H,),
        "midlayer.post_attention_layernorm.weight": (H,),
        "norm.weight": (H,),
        "lm_head.weight": (Vd, H),
        "d2t": (Vd,),
    }
    if bias:
        expected |= {
            f"midlayer.self_attn.{p}_proj.bias": (n,) for p, n in (("q", heads * hd), ("k", kv * hd), ("v", kv * hd))
        }
    for name, shape in expected.items():
        if name not in weights:
            raise ValueError(f"{path}: no tensor {name} (expected shape {list(shape)})")
        if tuple(weights[name].shape) != shape:
            raise ValueError(f"{path}: {name} has shape {list(weights[name].shape)}, expected {list(shape)}")
    if tuple(embed.shape) != (V, H):
        raise ValueError(f"embed_tokens has shape {list(embed.shape)}, expected [{V}, {H}] (the target's vocabulary)")
    targets = torch.arange(Vd, device=param.device) + weights["d2t"].long()
    if Vd and not (int(targets.min()) >= 0 and int(targets.max()) < V):
        raise ValueError(f"{path}: d2t maps draft ids outside the target's vocabulary [0, {V})")
    weights = {n: (t.long() if n == "d2t" else t.to(param.dtype)) for n, t in weights.items()}
    return Eagle3Draft(
        config, weights, embed.to(param.dtype), taps=taps, vocab_size=V, num_rows=max_requests + 1,
        max_seq_len=max_seq_len,
    )  # fmt: skip
