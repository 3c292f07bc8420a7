"""Multi-token-prediction (MTP) heads shipped inside a target's checkpoint, as graph-safe drafts for that
Hugging Face target: the layout of DeepSeek-V3 and GLM-4.5, whose checkpoint keeps the MTP module as the
layer after the last, ``model.layers.{L}`` (transformers drops it when it loads the target).

That layer holds ``enorm`` and ``hnorm`` (RMSNorm weights), ``eh_proj [H, 2H]``, a decoder block of the
target's own kind (``self_attn.*``, ``mlp.*``, ``input_layernorm``, ``post_attention_layernorm``) and
``shared_head.{norm, head}``; ``embed_tokens`` where it keeps one (else the target's). Per position, as
vLLM's ``deepseek_mtp``:

* ``x = eh_proj(cat(enorm(embed(token)), hnorm(hidden)))``, with ``hidden`` the target's final
  (post-norm) hidden state, or the previous draft step's output;
* ``out = block(x)`` over the head's own cache; logits are ``shared_head.head(shared_head.norm(out))``,
  and ``out`` (before the norm) is the next step's ``hidden``.

The block runs as a one-layer model of the target's class (its attention, MoE and rotary embedding
unchanged) through the adapter's cache (:class:`~stepgraph.adapters.hf.HFCausalLM`): a forward pre-hook
on the layer replaces its input with ``x``, and one on the final norm keeps ``out``.
"""

from __future__ import annotations

import copy
import json
import weakref
from pathlib import Path

import torch
import torch.nn.functional as F

from stepgraph.drafts.eagle import _check, _rms


def _read_layer(path: Path, prefix: str) -> dict[str, torch.Tensor]:
    """The tensors under ``prefix`` in the checkpoint at ``path`` (its index picks the shards to open)."""
    from safetensors import safe_open

    index = path / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = sorted({path / f for name, f in weight_map.items() if name.startswith(prefix)})
    else:
        files = sorted(path.glob("*.safetensors"))
    out = {}
    for f in files:
        with safe_open(str(f), framework="pt") as fh:
            for name in fh.keys():  # noqa: SIM118 (a safetensors handle, not a dict)
                if name.startswith(prefix):
                    out[name.removeprefix(prefix)] = fh.get_tensor(name)
    return out


class MTPDraft:
    """``draft(tokens [B, T], positions [B, T], hidden [B, T, H], cache_rows [B]) -> (logits [B, T, V], hidden
    [B, T, H])``: the target's MTP layer (module docstring) with its own cache of ``max_requests + 1`` rows
    of ``max_seq_len`` positions. Build one with :func:`load_mtp`."""

    taps = None

    def __init__(self, target_model, weights: dict[str, torch.Tensor], *, max_requests: int, max_seq_len: int) -> None:
        from stepgraph.adapters.hf import HFCausalLM

        cfg = copy.deepcopy(target_model.config)
        L = cfg.num_hidden_layers
        if hasattr(cfg, "first_k_dense_replace"):  # the MTP layer is dense or MoE as layer L would be
            cfg.first_k_dense_replace = 1 if cfg.first_k_dense_replace > L else 0
        cfg.num_hidden_layers = 1
        param = next(target_model.parameters())
        mini = type(target_model)(cfg).to(param.device, param.dtype).eval()
        own = ("enorm", "hnorm", "eh_proj", "shared_head", "embed_tokens")
        block = {n: t for n, t in weights.items() if n.split(".")[0] not in own}
        try:
            problems = mini.model.layers[0].load_state_dict(block, strict=False)
        except RuntimeError as e:  # a tensor of another shape
            raise ValueError(f"the MTP layer's block does not fit the target's layers: {e}") from None
        bad = [*problems.missing_keys, *problems.unexpected_keys]
        if bad:
            raise ValueError(f"the MTP layer's block does not match the target's layers: {', '.join(sorted(bad))}")
        embed = weights.get("embed_tokens.weight")
        with torch.no_grad():
            if embed is None:  # the target's, shared
                mini.set_input_embeddings(target_model.get_input_embeddings())
            else:
                mini.get_input_embeddings().weight.copy_(embed)
            mini.model.norm.weight.copy_(weights["shared_head.norm.weight"])
            mini.get_output_embeddings().weight.copy_(weights["shared_head.head.weight"])
        self.mini, self.hidden_size, self.eps = mini, cfg.hidden_size, float(getattr(cfg, "rms_norm_eps", 1e-6))
        self.dtype, self.device = param.dtype, param.device
        self.num_rows, self.max_seq_len = max_requests + 1, max_seq_len
        own_weights = ("enorm.weight", "hnorm.weight", "eh_proj.weight")
        self.w = {n: weights[n].to(param.device, param.dtype).detach() for n in own_weights}
        self.lm = HFCausalLM(mini, max_requests=max_requests, max_seq_len=max_seq_len, attention="gather")
        self._hidden: torch.Tensor | None = None
        self._out: torch.Tensor | None = None
        me = weakref.ref(self)

        def combine(module, args, kwargs):  # the layer's input: eh_proj over the embedding and the hidden state
            d = me()
            if d is None or d._hidden is None:  # not a draft call (the adapter measuring cache shapes)
                return None
            e = _rms(args[0], d.w["enorm.weight"], d.eps)
            x = F.linear(torch.cat([e, _rms(d._hidden, d.w["hnorm.weight"], d.eps)], -1), d.w["eh_proj.weight"])
            return (x, *args[1:]), kwargs

        def keep(module, args) -> None:
            d = me()
            if d is not None:
                d._out = args[0]

        weakref.finalize(self, mini.model.layers[0].register_forward_pre_hook(combine, with_kwargs=True).remove)
        weakref.finalize(self, mini.model.norm.register_forward_pre_hook(keep).remove)

    def __call__(self, tokens, positions, hidden, cache_rows):
        self._hidden = hidden.to(self.dtype)
        try:
            logits, _ = self.lm(tokens, positions, cache_rows)
        finally:
            self._hidden = None
        out, self._out = self._out, None
        return logits, out


def load_mtp(path: str | Path, target_model, *, max_requests: int = 8, max_seq_len: int = 512) -> MTPDraft:
    """The MTP head of ``target_model`` from its checkpoint directory ``path`` (module docstring): the
    tensors of ``model.layers.{L}`` (read from the shards that hold them), in the target's dtype and
    device. Pass it as ``hf_spec_decoder``'s draft, with the same sizes.

    Raises
    ------
    ValueError
        For a checkpoint without an MTP layer, or one whose tensors do not fit the target (naming them).
    """
    path = Path(path)
    L = target_model.config.num_hidden_layers
    weights = _read_layer(path, f"model.layers.{L}.")
    if not weights:
        raise ValueError(
            f"{path} holds no MTP layer (no tensor under model.layers.{L}., the layer after the target's last): "
            "DeepSeek-V3 and GLM-4.5 checkpoints keep it there"
        )
    H = target_model.config.hidden_size
    V = target_model.config.vocab_size
    expected = {"enorm.weight": (H,), "hnorm.weight": (H,), "eh_proj.weight": (H, 2 * H),
                "shared_head.norm.weight": (H,), "shared_head.head.weight": (V, H)}  # fmt: skip
    _check(path, weights, expected, prefix=f"model.layers.{L}.")
    return MTPDraft(target_model, weights, max_requests=max_requests, max_seq_len=max_seq_len)
