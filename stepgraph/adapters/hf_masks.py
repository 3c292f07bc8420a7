"""Attention masks for the Hugging Face adapter, per layer as the model defines them.

The adapter passes the model its own 4-D additive masks (each request at its own position in a static
cache), so the windows that transformers would build from its masking utilities must be built here:

- ``config.layer_types`` names each layer's attention: ``"full_attention"`` (causal),
  ``"sliding_attention"`` (the last ``config.sliding_window`` positions, the query's own included) and
  ``"chunked_attention"`` (the causal part of the query's chunk of ``config.attention_chunk_size``
  positions, Llama 4). A model whose layers mix types takes one mask per type (a dict keyed by layer type,
  as transformers' own models of that kind accept); one whose forward does not take that dict is refused.
- Without ``layer_types``, a model whose forward builds a sliding-window mask (Mistral, Mixtral, Phi-3,
  Starcoder2) windows every layer by ``config.sliding_window``; one that only hands the window to a
  flash kernel (and so runs SDPA and eager attention unwindowed) gets the causal mask, as it runs.
- Anything else (linear or recurrent layers, chunked attention without ``layer_types``) is refused at
  construction, naming it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

FULL = "full_attention"
SLIDING = "sliding_attention"
CHUNKED = "chunked_attention"


@dataclass(frozen=True)
class Span:
    """What a query sees beyond causality: the last ``size`` positions (``"window"``) or its own chunk of
    ``size`` positions (``"chunk"``)."""

    kind: str
    size: int


@dataclass(frozen=True)
class AttentionMasks:
    """How to build one forward's masks: ``spans`` maps each layer type to its :class:`Span` (``None``:
    full causal); ``per_type`` says whether the model takes a dict of masks keyed by layer type (layers
    mix types) or one mask for every layer."""

    spans: dict[str, Span | None]
    per_type: bool
    layer_types: tuple[str, ...] = ()

    def causal_only(self, layer: int) -> bool:
        """Whether layer ``layer`` sees every earlier position (no window, no chunk)."""
        if self.layer_types:
            return self.spans[self.layer_types[layer]] is None
        return all(span is None for span in self.spans.values())

    def build(self, key_pos: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype):
        """``key_pos [S]`` (the cache's positions), ``positions [B, T]`` (each query's) -> one additive mask
        ``[B, 1, T, S]`` (0 where visible, ``-inf`` elsewhere), or a dict of them keyed by layer type."""
        keys = key_pos[None, None, None, :]
        queries = positions[:, None, :, None]
        causal = keys <= queries
        built: dict[Span | None, torch.Tensor] = {}
        for span in set(self.spans.values()):
            if span is None:
                visible = causal
            elif span.kind == "window":
                visible = causal & (keys > queries - span.size)
            else:
                visible = causal & (keys // span.size == queries // span.size)
            built[span] = torch.zeros(visible.shape, device=key_pos.device, dtype=dtype).masked_fill_(
                ~visible, float("-inf")
            )
        if self.per_type:
            return {layer_type: built[span] for layer_type, span in self.spans.items()}
        (mask,) = built.values()
        return mask


def attention_masks(model, base) -> AttentionMasks:
    """The masks ``model`` needs, read from its config and its base model's (``base``) forward.

    Raises
    ------
    ValueError
        For a layer type the adapter cannot honour, naming it.
    """
    config = model.config
    name = type(model).__name__
    window = getattr(config, "sliding_window", None)
    chunk = getattr(config, "attention_chunk_size", None)
    layer_types = getattr(config, "layer_types", None)
    if not layer_types:
        if chunk and "create_chunked_causal_mask" in _forward_source(base):
            raise ValueError(
                f"{name} uses chunked attention without config.layer_types; the adapter cannot tell its layers"
            )
        windowed = window is not None and "create_sliding_window_causal_mask" in _forward_source(base)
        return AttentionMasks({SLIDING: Span("window", window)} if windowed else {FULL: None}, per_type=False)
    unknown = sorted(set(layer_types) - {FULL, SLIDING, CHUNKED})
    if unknown:
        raise ValueError(
            f"{name} has layers of type {', '.join(map(repr, unknown))} (config.layer_types); the adapter "
            f"serves {FULL!r}, {SLIDING!r} and {CHUNKED!r} layers only"
        )
    sizes = {SLIDING: ("window", "sliding_window", window), CHUNKED: ("chunk", "attention_chunk_size", chunk)}
    spans: dict[str, Span | None] = {}
    for layer_type in sorted(set(layer_types)):
        if layer_type == FULL:
            spans[layer_type] = None
            continue
        kind, field, size = sizes[layer_type]
        if not size:
            raise ValueError(f"{name} has {layer_type!r} layers but config.{field} is {size!r}")
        spans[layer_type] = Span(kind, size)
    if len(spans) > 1 and "attention_mask, dict)" not in _forward_source(base):
        raise ValueError(
            f"{name} mixes {' and '.join(map(repr, spans))} layers, but its forward does not take one mask per "
            "layer type (a dict keyed by type), so they cannot be honoured"
        )
    return AttentionMasks(spans, per_type=len(spans) > 1, layer_types=tuple(layer_types))


def _forward_source(base) -> str:
    try:
        return inspect.getsource(type(base).forward)
    except (OSError, TypeError):  # no source (a compiled or C-defined forward): assume nothing
        return ""
