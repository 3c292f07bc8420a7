"""Attention masks for the Hugging Face adapter, per layer as the model defines them.

The adapter passes the model its own 4-D additive masks (each request at its own position in a static
cache), so the windows that transformers would build from its masking utilities must be built here:

- ``config.layer_types`` names each layer's attention: ``"full_attention"`` (causal) and
  ``"sliding_attention"`` (the last ``config.sliding_window`` positions, the query's own included). A model
  whose layers mix the two takes one mask per type (a dict keyed by layer type, as transformers' own
  models of that kind accept); one whose forward does not take that dict is refused.
- Without ``layer_types``, a model whose forward builds a sliding-window mask (Mistral, Mixtral, Phi-3,
  Starcoder2) windows every layer by ``config.sliding_window``; one that only hands the window to a
  flash kernel (and so runs SDPA and eager attention unwindowed) gets the causal mask, as it runs.
- Anything else (chunked attention, linear or recurrent layers) is refused at construction, naming the
  layer type.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

FULL = "full_attention"
SLIDING = "sliding_attention"


@dataclass(frozen=True)
class AttentionMasks:
    """How to build one forward's masks: ``windows`` maps each layer type to its window (``None``: full
    causal); ``per_type`` says whether the model takes a dict of masks keyed by layer type (layers mix
    types) or one mask for every layer."""

    windows: dict[str, int | None]
    per_type: bool

    def build(self, key_pos: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype):
        """``key_pos [S]`` (the cache's positions), ``positions [B, T]`` (each query's) -> one additive mask
        ``[B, 1, T, S]`` (0 where visible, ``-inf`` elsewhere), or a dict of them keyed by layer type."""
        keys = key_pos[None, None, None, :]
        queries = positions[:, None, :, None]
        causal = keys <= queries
        built: dict[int | None, torch.Tensor] = {}
        for window in set(self.windows.values()):
            visible = causal if window is None else causal & (keys > queries - window)
            built[window] = torch.zeros(visible.shape, device=key_pos.device, dtype=dtype).masked_fill_(
                ~visible, float("-inf")
            )
        if self.per_type:
            return {layer_type: built[window] for layer_type, window in self.windows.items()}
        (mask,) = built.values()
        return mask


def attention_masks(model) -> AttentionMasks:
    """The masks ``model`` needs, read from its config and its base model's forward.

    Raises
    ------
    ValueError
        For a layer type the adapter cannot honour, naming it.
    """
    config = model.config
    name = type(model).__name__
    if getattr(config, "attention_chunk_size", None):
        raise ValueError(
            f"{name} uses chunked attention (config.attention_chunk_size={config.attention_chunk_size}), which the "
            "adapter does not build masks for; such layers would attend across chunks and decode wrong tokens"
        )
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if not layer_types:
        windowed = window is not None and "create_sliding_window_causal_mask" in _forward_source(model)
        return AttentionMasks({SLIDING if windowed else FULL: window if windowed else None}, per_type=False)
    unknown = sorted(set(layer_types) - {FULL, SLIDING})
    if unknown:
        raise ValueError(
            f"{name} has layers of type {', '.join(map(repr, unknown))} (config.layer_types); the adapter "
            f"serves {FULL!r} and {SLIDING!r} layers only"
        )
    if SLIDING in layer_types and not window:
        raise ValueError(f"{name} has {SLIDING!r} layers but config.sliding_window is {window!r}")
    windows = {t: (window if t == SLIDING else None) for t in sorted(set(layer_types))}
    if len(windows) > 1 and "attention_mask, dict)" not in _forward_source(model):
        raise ValueError(
            f"{name} mixes {' and '.join(map(repr, windows))} layers, but its forward does not take one mask per "
            "layer type (a dict keyed by type), so its windows cannot be honoured"
        )
    return AttentionMasks(windows, per_type=len(windows) > 1)


def _forward_source(model) -> str:
    try:
        return inspect.getsource(type(model.base_model).forward)
    except (OSError, TypeError):  # no source (a compiled or C-defined forward): assume nothing
        return ""
