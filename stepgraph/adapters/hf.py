"""Hugging Face transformers adapter: speculative decoding with a target and a draft causal LM.

Both models keep their weights; stepgraph gives each a static KV cache indexed by request row, with a
position per row (:class:`HFKVCache`), over rows or pages (``kv="paged"``: both models' pages named by
one block table, :mod:`stepgraph.kv`), and passes 4-D attention masks, so a forward over ``[B, T]``
tokens at per-request positions is graph-safe. The masks are the model's own per layer: causal, or a
sliding window or chunks where the model's layers have them (:mod:`stepgraph.adapters.hf_masks`;
linear, recurrent and unknown layer types are refused at construction). A plain draft model ignores
the target's hidden states; an EAGLE-style head gets them.

Greedy policy: in float32 the speculative output equals the target's own greedy ``generate()`` token for
token (tested on CPU). In bf16 on the GPU the verify forward (K+1 tokens) and a one-token decode use
different GEMM shapes, whose roundings differ; near-ties can then resolve differently from ``generate()``.
What stepgraph guarantees there is that the step graph equals the eager step at the same padded shape
bit for bit; the agreement rate with ``generate()`` is measured, not promised.

Attention: ``attention="rows"`` hands the model an attention that reads the rows in place
(:func:`stepgraph.kernels.decode_attention.decode_attention`, up to each request's position) for the
decode and verify forwards; prefill and layers it cannot serve (sliding windows, chunks, soft-capping,
more than 64 query rows per KV head) gather the rows and run SDPA. Results match the gathering path to
floating-point tolerance, not bit for bit. The model keeps that attention: used outside the adapter (its
own ``generate()``), it runs SDPA. It needs a model that dispatches through transformers'
``AttentionInterface`` and runs SDPA without attention soft-capping, on a device that runs Triton
(:func:`rows_attention_refusal`), with keys and values of one width. ``attention="gather"`` leaves the
model's attention alone and hands each layer the rows' whole caches (a gather per layer and forward).
``attention="auto"`` (the default) picks ``"rows"`` where it applies, else ``"gather"``;
``HFCausalLM.attention`` says which.

Needs the optional ``hf`` extra (``pip install 'stepgraph[hf]'``).
"""

from __future__ import annotations

import contextvars
import copy
import inspect
import weakref
from collections.abc import Sequence

import torch

from stepgraph.adapters.hf_generate import HFSpecDecoder
from stepgraph.adapters.hf_masks import attention_masks
from stepgraph.config import RunnerConfig
from stepgraph.drafts import PromptLookupDraft
from stepgraph.kernels._common import use_triton
from stepgraph.kernels.decode_attention import fits
from stepgraph.kv import KVCache, RowKV, make_kv

ATTENTIONS = ("auto", "rows", "gather")
ROWS_ATTENTION = "stepgraph_rows"  # the name the in-place attention is registered under in transformers
PREFILL_CHUNK = 256  # prefill_chunk="auto" on a GPU: a batch's prompts prefilled together, as generate() does
_ACTIVE: contextvars.ContextVar[HFKVCache | None] = contextvars.ContextVar("stepgraph_hf_cache", default=None)


class HFKVCache:
    """A static KV cache for an HF decoder over a stepgraph KV layout (:mod:`stepgraph.kv`): per layer that
    caches, ``kv[layer]`` as the layout makes it (rows ``[rows + 1, 2, kv_heads, max_seq_len, width]``, or
    pages ``[pages + 1, 2, kv_heads, page_size, width]``; keys, values). One tensor per layer, not slices of
    one: under ``compile=True`` the new keys and values are then written in place (a write into a slice of
    a larger tensor compiles to a copy of it).

    ``shapes`` maps each caching layer to ``(kv_heads, key_dim, value_dim)``, as the model's layers make
    them (:func:`cache_shapes`); where keys and values differ in width (multi-head latent attention) both
    take the larger, the narrower zero-padded. Before each forward, :attr:`rows` (``[B]``) and
    :attr:`positions` (``[B, T]``) say where the new keys and values go (:attr:`where`: the layout's slot
    mapping); ``update`` writes them there and returns the rows' whole caches (``gather``), or the layer's
    whole cache as views for the in-place attention (``rows``). The layout's scratch row serves padded batch
    rows.
    """

    is_compileable = False

    def __init__(self, shapes, layout: KVCache, dtype, attention: str = "gather"):
        self.shapes, self.layout = dict(shapes), layout
        self.kv = {
            layer: layout.layer_cache(heads, max(kd, vd), dtype) for layer, (heads, kd, vd) in self.shapes.items()
        }
        self.attention = attention
        self.in_place_layers: frozenset[int] = frozenset()  # the layers the rows attention reads in place
        self.scratch_row = layout.scratch_row
        self.rows: torch.Tensor | None = None
        self.positions: torch.Tensor | None = None
        self.where: tuple[torch.Tensor, torch.Tensor] | None = None

    def place(self, rows: torch.Tensor, positions: torch.Tensor) -> None:
        """Where the next forward's keys and values go: rows ``[B]``, positions ``[B, T]``."""
        self.rows, self.positions, self.where = rows, positions, self.layout.locate(rows, positions)

    def gathered(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The active rows of ``layer`` as keys and values ``[B, KVH, S, width]`` (for SDPA)."""
        g = self.layout.gather(self.kv[layer], self.rows)
        return g[:, 0], g[:, 1]

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        B, _, T, _ = key_states.shape  # [B, KVH, T, hd]
        kv = self.kv[layer_idx]
        _, kd, vd = self.shapes[layer_idx]
        if kd != vd:
            width = max(kd, vd)
            key_states = torch.nn.functional.pad(key_states, (0, width - kd))
            value_states = torch.nn.functional.pad(value_states, (0, width - vd))
        new = torch.stack([key_states, value_states], 1).permute(0, 3, 1, 2, 4)  # [B, T, 2, KVH, hd]
        self.layout.write(kv, new, self.where)
        # rows: the whole layer as views, read in place by rows_attention; else the rows gathered
        cached = kv if self.attention == "rows" else self.layout.gather(kv, self.rows)
        if kd != vd:
            return cached[:, 0, ..., :kd], cached[:, 1, ..., :vd]
        return cached[:, 0], cached[:, 1]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # positions are always passed explicitly


class _ShapeProbe:
    """A cache that records each layer's key and value shapes and keeps nothing (:func:`cache_shapes`)."""

    is_compileable = False

    def __init__(self) -> None:
        self.shapes: dict[int, tuple[int, int, int]] = {}

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        if key_states.shape[1] != value_states.shape[1]:
            raise ValueError(
                f"layer {layer_idx} caches keys of {key_states.shape[1]} heads and values of "
                f"{value_states.shape[1]}; the adapter's cache needs one head count per layer"
            )
        self.shapes[layer_idx] = (key_states.shape[1], key_states.shape[-1], value_states.shape[-1])
        return key_states, value_states

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0


def cache_shapes(model, cache_kw: str, masks) -> dict[int, tuple[int, int, int]]:
    """``{layer: (kv_heads, key_dim, value_dim)}`` for each layer of ``model`` that caches, measured by a
    one-token forward (the model's own shapes, not its config's: a config can carry head counts its
    layers ignore, and latent attention caches keys and values of different widths)."""
    param = next(model.parameters())
    probe = _ShapeProbe()
    positions = torch.zeros((1, 1), dtype=torch.long, device=param.device)
    mask = masks.build(torch.zeros(1, dtype=torch.long, device=param.device), positions, param.dtype)
    with torch.no_grad():
        model(input_ids=positions, attention_mask=mask, position_ids=positions, use_cache=True, **{cache_kw: probe})
    if not probe.shapes:
        raise ValueError(f"{type(model).__name__} wrote no keys or values to its cache in a forward")
    return probe.shapes


def rows_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The ``attention="rows"`` attention (registered with transformers as ``stepgraph_rows``).

    ``query [B, H, T, hd]``; ``key``/``value``: the layer's whole cache ``[rows + 1, KVH, S, hd]`` (views of
    the active :class:`HFKVCache`). Returns ``([B, T, H, hd], None)``. Falls back to the gathered rows and
    SDPA where the in-place kernel does not apply: layers with a window or chunks, soft-capping, shapes
    the kernel does not fit.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    cache = _ACTIVE.get()
    if cache is None or cache.attention != "rows":  # the model used outside the adapter (its generate())
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    B, H, T, _ = query.shape
    special = module.layer_idx not in cache.in_place_layers or kwargs.get("sliding_window") or kwargs.get("softcap")
    if special or not fits(H, key.shape[1], T) or scaling is None:
        k, v = cache.gathered(module.layer_idx)
        return sdpa_attention_forward(
            module, query, k, v, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )  # fmt: skip
    out = cache.layout.attend(query.transpose(1, 2), cache.kv[module.layer_idx], cache.rows, cache.positions, scaling)
    return out, None


def rows_attention_refusal(model) -> str | None:
    """Why ``attention="rows"`` cannot serve ``model`` (``None`` when it can): it needs a model whose
    attention dispatches through transformers' ``AttentionInterface`` and runs SDPA (the fallback runs
    what the model ran), without attention soft-capping, on a device that runs Triton."""
    config = model.config
    param = next(model.parameters())
    if not use_triton(param):
        return f"Triton does not run on {param.device} here (on a CPU, TRITON_INTERPRET=1 runs its interpreter)"
    if not getattr(model, "_supports_attention_backend", False):
        return "its attention does not dispatch through transformers' AttentionInterface"
    implementation = getattr(config, "_attn_implementation", None)
    if implementation not in ("sdpa", ROWS_ATTENTION):
        return f"the model runs {implementation!r} attention, not 'sdpa'"
    if getattr(config, "attn_logit_softcapping", None):
        return "the model soft-caps its attention logits"
    return None


def _use_rows_attention(model) -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ROWS_ATTENTION, rows_attention)
    # the masks SDPA gets: without them the model's own forward (outside the adapter) would build none, and
    # run unwindowed and unpadded
    AttentionMaskInterface.register(ROWS_ATTENTION, sdpa_mask)
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(ROWS_ATTENTION)
    else:
        model.config._attn_implementation = ROWS_ATTENTION


#: Families whose adapter logits are tested against ``model(...).logits`` and whose greedy output is
#: tested against ``generate()`` (tests/e2e/test_hf_families.py).
TESTED_FAMILIES = (
    "Llama", "Qwen2", "Qwen3", "Mistral", "Gemma", "Gemma2", "Gemma3", "Olmo", "Granite", "Cohere", "OPT",
    "GPT2", "GPTNeoX", "Falcon", "Phi",
)  # fmt: skip
#: The same with sliding-window or chunked layers, sequences several windows long (tests/e2e/test_hf_windows.py).
TESTED_WINDOWED_FAMILIES = (
    "Mistral", "Mixtral", "Phi3", "Starcoder2", "Qwen2", "Qwen3", "Gemma2", "Gemma3", "Cohere2", "GptOss",
    "Llama4",
)  # fmt: skip

_NEEDS = (
    "a decoder-only causal LM whose base model takes position_ids, a 4-D additive attention mask and a "
    "Cache object (an update(key, value, layer_idx) per layer), as Llama-style transformers models do; "
    f"tested families: {', '.join(TESTED_FAMILIES)}; with windows or chunks: {', '.join(TESTED_WINDOWED_FAMILIES)}"
)


def _base_model(model):
    """The decoder stack under the head: ``model.base_model``, or ``model.model`` where the class's
    ``base_model_prefix`` names no attribute (Llama 4 text: ``"language_model"``)."""
    base = getattr(model, "base_model", None)
    if base is None or base is model:
        base = getattr(model, "model", None)
    if base is None or base is model or getattr(model.config, "is_encoder_decoder", False):
        raise ValueError(f"{type(model).__name__} is not supported: the adapter needs {_NEEDS}")
    return base


class HFCausalLM:
    """``lm(tokens [B, T], positions [B, T], cache_rows [B]) -> (logits [B, T, V], hidden [B, T, D])``.

    The logits are the model's own (``model(...).logits``: its head and whatever its forward does after
    it, such as Granite's logits scaling, Cohere's logit scale or Gemma 2's soft-capping); ``hidden`` is
    what the head reads (the final hidden state), taken by a forward pre-hook on the output embeddings;
    with ``taps`` (layer ids), the residual stream entering each of those layers instead, concatenated
    ``[B, T, len(taps) * D]`` (what an EAGLE-3 head reads; vLLM's convention: id ``i`` is the input of
    layer ``i``, ``hidden_states[i]`` of transformers' ``output_hidden_states``).

    Raises
    ------
    ValueError
        At construction, for a model the adapter cannot drive (the message says what it needs).
    """

    def __init__(
        self,
        model,
        *,
        max_requests: int,
        max_seq_len: int,
        attention: str = "auto",
        kv: KVCache | None = None,
        taps: Sequence[int] | None = None,
    ) -> None:
        if attention not in ATTENTIONS:
            raise ValueError(f"attention={attention!r}: use one of {', '.join(ATTENTIONS)}")
        self.model = model.eval()
        self.config = model.config
        base = _base_model(model)
        can_generate = getattr(model, "can_generate", None)
        if can_generate is not None and not can_generate():
            raise ValueError(
                f"{type(model).__name__} is not a causal language model (its can_generate() is False: a masked or "
                f"classification head); load the checkpoint with AutoModelForCausalLM. The adapter needs {_NEEDS}"
            )
        params = inspect.signature(base.forward).parameters
        # transformers renamed the cache argument (past_key_values -> cache, 5.2x); use whichever exists
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        missing = [p for p in ("position_ids", "attention_mask", self._cache_kw) if p not in params]
        if missing:
            raise ValueError(
                f"{type(model).__name__} is not supported (no {', '.join(missing)}): the adapter needs {_NEEDS}"
            )
        self.masks = attention_masks(model, base)
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        shapes = cache_shapes(model, self._cache_kw, self.masks)
        refusal = rows_attention_refusal(model)
        if refusal is None and any(kd != vd for _, kd, vd in shapes.values()):
            refusal = "its keys and values differ in width (latent attention)"
        if attention == "rows" and refusal:
            raise ValueError(f"attention='rows' cannot serve {type(model).__name__}: {refusal}; use 'gather' or 'auto'")
        self.attention = "gather" if attention == "gather" or refusal else "rows"
        self.kv = RowKV(max_requests, max_seq_len, self.device) if kv is None else kv
        self.cache = HFKVCache(shapes, self.kv, self.dtype, self.attention)
        if self.attention == "rows":
            self.cache.in_place_layers = frozenset(layer for layer in shapes if self.masks.causal_only(layer))
            _use_rows_attention(model)
        self.key_pos = torch.arange(self.kv.row_len, device=self.device)
        self._hidden: torch.Tensor | None = None
        self._head = model.get_output_embeddings()
        if self._head is None:
            raise ValueError(
                f"{type(model).__name__} is not supported (no output embeddings): the adapter needs {_NEEDS}"
            )
        me = weakref.ref(self)  # the model must not keep this adapter (and its cache) alive

        def keep_hidden(module, args) -> None:
            lm = me()
            if lm is not None:
                lm._hidden = args[0]  # what the head reads: the final hidden state, whatever the family calls it

        weakref.finalize(self, self._head.register_forward_pre_hook(keep_hidden).remove)
        self.taps = self._tap(base, taps) if taps is not None else None

    def _tap(self, base, taps: Sequence[int]) -> tuple[int, ...]:
        """Forward pre-hooks that keep the residual stream entering each layer in ``taps``."""
        layers = getattr(base, "layers", None)
        n = len(layers) if layers is not None else 0
        taps = tuple(taps)
        if not taps or not all(isinstance(i, int) and 0 <= i < n for i in taps):
            raise ValueError(
                f"taps {taps} must be layer ids in 0..{n - 1}: the residual stream entering those layers of "
                f"{type(self.model).__name__} ({n} layers)"
            )
        self._tapped: dict[int, torch.Tensor] = {}
        me = weakref.ref(self)

        def keep(i):
            def hook(module, args, kwargs) -> None:
                lm = me()
                if lm is not None:
                    lm._tapped[i] = args[0] if args else kwargs["hidden_states"]

            return hook

        for i in dict.fromkeys(taps):
            weakref.finalize(self, layers[i].register_forward_pre_hook(keep(i), with_kwargs=True).remove)
        return taps

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def hidden_size(self) -> int:
        """Width of the hidden state handed out: the head's input features, or with ``taps`` the tapped
        states side by side."""
        if self.taps is not None:
            return len(self.taps) * self.config.hidden_size
        return getattr(self._head, "in_features", self.config.hidden_size)

    def __call__(self, tokens, positions, cache_rows, hidden=None):
        self.cache.place(cache_rows, positions)
        mask = self.masks.build(self.key_pos, positions, self.dtype)  # [B, 1, T, S], or one per layer type
        token = _ACTIVE.set(self.cache)
        try:
            with torch.no_grad():
                kwargs = {self._cache_kw: self.cache}
                out = self.model(
                    input_ids=tokens, attention_mask=mask, position_ids=positions, use_cache=True, **kwargs
                )
        finally:
            _ACTIVE.reset(token)
        hidden, self._hidden = self._hidden, None
        if self.taps is not None:
            hidden = torch.cat([self._tapped[i] for i in self.taps], -1)
            self._tapped.clear()
        return out.logits, hidden


class _AsDraft:
    """The draft model as the step calls a draft. Over a vocabulary padded to another size than the
    target's: proposals come from the first ``min(Vd, Vt)`` logits (a target id), and a target token past
    the draft's rows (padding beyond the tokenizer, never a real token) is read as the draft's last row."""

    def __init__(self, lm: HFCausalLM, target_vocab: int) -> None:
        self.lm = lm
        self.hidden_size, self.dtype = lm.hidden_size, lm.dtype
        self.width = min(lm.vocab_size, target_vocab)
        self.last_row = lm.vocab_size - 1 if lm.vocab_size < target_vocab else None

    def __call__(self, tokens, positions, hidden, cache_rows):
        if self.last_row is not None:
            tokens = tokens.clamp_max(self.last_row)
        logits, hid = self.lm(tokens, positions, cache_rows)
        return (logits if logits.shape[-1] == self.width else logits[..., : self.width]), hid


class _AsHead:
    """An EAGLE-style head as the step calls a draft: it gets the target's hidden states (the LM head's
    input, ``[B, T, D]``) and keeps its own cache; its proposals come from the first ``Vt`` logits."""

    def __init__(self, head, target_vocab: int, dtype: torch.dtype) -> None:
        size = getattr(head, "hidden_size", None)
        if not callable(head) or not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise TypeError(
                "draft must be a Hugging Face causal LM, or an EAGLE-style head: a callable head(tokens [B, T], "
                "positions [B, T], hidden [B, T, D], cache_rows [B]) -> (logits [B, T, V], hidden [B, T, Dh]) "
                f"with an int hidden_size (Dh); got {type(head).__name__}"
            )
        self.head, self.hidden_size, self.width = head, size, target_vocab
        self.dtype = getattr(head, "dtype", dtype)

    def __call__(self, tokens, positions, hidden, cache_rows):
        logits, hid = self.head(tokens, positions, hidden, cache_rows)
        return (logits if logits.shape[-1] <= self.width else logits[..., : self.width]), hid


def _check_vocabularies(tv: int, dv: int, tokenizer) -> None:
    """Equal vocabularies, or two padded to different sizes over one tokenizer that both cover."""
    if tv == dv:
        return
    if tokenizer is None:
        raise ValueError(
            f"target and draft vocabularies differ ({tv} vs {dv}); the draft must share the tokenizer. If both are "
            "padded over one tokenizer to different sizes, pass tokenizer=... so the adapter can check they cover it"
        )
    n = len(tokenizer)
    if n > min(tv, dv):
        raise ValueError(
            f"target and draft vocabularies differ ({tv} vs {dv}) and the tokenizer has {n} tokens, more than "
            f"{min(tv, dv)}: they are not one vocabulary padded to two sizes"
        )


def default_prefill_chunk(device: torch.device) -> int | None:
    """``hf_spec_decoder``'s ``prefill_chunk="auto"`` on ``device``: :data:`PREFILL_CHUNK` on a CUDA device
    (one captured forward for a batch's prompts), else ``None`` (each prompt whole: without graphs a chunk
    forward's padding is computed, not saved)."""
    return PREFILL_CHUNK if torch.device(device).type == "cuda" else None


def hf_spec_decoder(
    target_model,
    draft_model,
    *,
    max_requests: int = 8,
    max_seq_len: int = 512,
    num_draft_tokens: int = 3,
    max_batch: int | None = None,
    config: RunnerConfig | None = None,
    eos_token_id: int | Sequence[int] | None | str = "generation_config",
    seed: int = 0,
    attention: str = "auto",
    compile: bool | str = False,
    generation_config=None,
    tokenizer=None,
    logprobs: int | None = None,
    kv: str = "rows",
    page_size: int = 16,
    num_pages: int | None = None,
    kv_schedule: str = "fixed",
    penalties: bool | None = None,
    prefill_chunk: int | None | str = "auto",
    logprobs_mode: str = "raw",
    prompt_logprobs: int | None = None,
) -> HFSpecDecoder:
    """An :class:`~stepgraph.adapters.hf_generate.HFSpecDecoder` over an HF causal LM (e.g.
    ``LlamaForCausalLM``) and a draft: another causal LM sharing its vocabulary (or one tokenizer's, padded
    to two sizes, given ``tokenizer``), a head, or prompt lookup. Its ``generate()`` takes what
    ``model.generate()`` takes and defaults to the target's ``generation_config``
    (:mod:`stepgraph.adapters.hf_generate`).

    Parameters
    ----------
    target_model:
        The Hugging Face causal LM that decides every token.
    draft_model:
        One of:

        * a plain draft model, an HF causal LM (both get a :class:`HFKVCache` of ``max_requests`` rows of
          ``max_seq_len`` positions);
        * ``"prompt_lookup"``: n-gram matches in each request's own tokens, no draft model
          (:class:`~stepgraph.drafts.PromptLookupDraft`, matching up to the generation config's
          ``max_matching_ngram_size`` tokens, default 3);
        * a trained head: :func:`stepgraph.drafts.load_eagle` (EAGLE-3, EAGLE-1/2) or
          :func:`stepgraph.drafts.load_mtp` (the target's own MTP layer);
        * an EAGLE-style head of your own: a callable ``head(tokens [B, T], positions [B, T], hidden [B, T,
          D], cache_rows [B]) -> (logits [B, T, V], hidden [B, T, Dh])`` with an int ``hidden_size`` (Dh),
          given the target's hidden states (the LM head's input) and keeping its own cache of
          ``max_requests + 1`` rows (the last one scratch). A head with ``taps`` (an EAGLE-3 head) gets the
          residual stream entering those target layers instead, side by side.
    eos_token_id:
        By default the target's ``generation_config.eos_token_id`` (an id or a list, where ``generate()``
        stops too); an id or a list of ids; ``None`` never stops early.
    attention:
        ``"auto"`` (``"rows"`` where it applies, else ``"gather"``), ``"rows"`` or ``"gather"`` (module
        docstring).
    compile:
        torch.compile the step's target and draft forwards inside the step graph (:class:`SpecDecoder`).
    generation_config:
        The ``GenerationConfig`` its ``generate()`` starts from (default: the target's; copied).
    tokenizer:
        For text prompts and ``stop_strings``.
    logprobs, logprobs_mode:
        ``None``, or the alternatives per token (0..20) to report with each token's log-probability, under
        ``"raw"`` or ``"processed"`` (:class:`SpecDecoder`).
    prompt_logprobs:
        ``None``, or the alternatives per position (0..20) to report with each prompt token's
        log-probability (:class:`SpecDecoder`; ``generate(..., return_dict_in_generate=True)`` returns them).
    kv, page_size, num_pages, kv_schedule:
        ``"rows"`` (a row of ``max_seq_len`` positions per request) or ``"paged"`` (``num_pages`` pages of
        ``page_size`` positions, by default the rows' memory, handed out as requests grow:
        :class:`~stepgraph.kv.PagedKV`); a head keeps its own cache. ``kv_schedule``: the paged cache's
        attention schedule with ``attention="rows"`` (``"fixed"``, or ``"planned"`` on the host before each
        replay).
    penalties:
        Serve repetition penalties, ``min_new_tokens``, ``min_length``, ``no_repeat_ngram_size``,
        ``sequence_bias`` and ``bad_words_ids`` (:class:`SpecDecoder`);
        ``None``: on when the generation config sets one.
    prefill_chunk:
        Prompt positions prefilled between two steps, in chunks of up to 8 requests, each chunk forward one
        graph (:class:`SpecDecoder`); ``None`` prefills each prompt whole, eagerly and alone. ``"auto"``
        (the default) is :func:`default_prefill_chunk` of the target's device: 256 on a GPU, so that a
        batch's prompts go through together as in ``model.generate()`` (one eager forward of each model
        per prompt cost more than the decoding at B = 8); ``None`` elsewhere, where no graph is captured
        and a chunk forward computes all its positions however short the prompt.
    max_requests, max_seq_len, num_draft_tokens, max_batch, config, seed:
        As :class:`SpecDecoder` takes them.

    Raises
    ------
    ValueError
        For vocabularies that differ (other than one tokenizer's padded to two sizes, with ``tokenizer``), a
        model the adapter cannot drive, or EOS ids outside the vocabulary.
    """
    tv = target_model.config.vocab_size
    lookup = isinstance(draft_model, str)
    if lookup and draft_model != "prompt_lookup":
        raise ValueError(
            f"draft {draft_model!r}: give a Hugging Face causal LM, an EAGLE-style head or 'prompt_lookup'"
        )
    is_lm = not lookup and hasattr(getattr(draft_model, "config", None), "vocab_size")
    if is_lm:
        _check_vocabularies(tv, draft_model.config.vocab_size, tokenizer)
    if generation_config is None:
        generation_config = getattr(target_model, "generation_config", None)
    generation = copy.deepcopy(generation_config)
    if isinstance(eos_token_id, str):
        if eos_token_id != "generation_config":
            raise ValueError(f"eos_token_id={eos_token_id!r}: give an id, a list of ids, None or 'generation_config'")
        eos_token_id = getattr(generation, "eos_token_id", None)
        if eos_token_id is not None:
            ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
            if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
                raise ValueError(
                    f"the target's generation_config.eos_token_id is {eos_token_id!r}: every id must be an int; "
                    "fix the model's generation_config, or pass eos_token_id=... (an id, a list, or None) to "
                    "hf_spec_decoder"
                )
            bad = [i for i in ids if not 0 <= i < tv]
            if bad:
                raise ValueError(
                    f"the target's generation_config.eos_token_id {eos_token_id} has ids outside the vocabulary "
                    f"[0, {tv}); pass eos_token_id=... (an id, a list, or None) to hf_spec_decoder"
                )
    device = next(target_model.parameters()).device
    if isinstance(prefill_chunk, str):
        if prefill_chunk != "auto":
            raise ValueError(f"prefill_chunk={prefill_chunk!r}: give positions per chunk (an int), None or 'auto'")
        prefill_chunk = default_prefill_chunk(device)
    layout = make_kv(
        kv, max_requests, max_seq_len, device, page_size=page_size, num_pages=num_pages, schedule=kv_schedule
    )
    size = {"max_requests": max_requests, "max_seq_len": max_seq_len, "attention": attention, "kv": layout}
    taps = None if is_lm or lookup else getattr(draft_model, "taps", None)  # an EAGLE-3 head reads three layers
    if not (is_lm or lookup):  # a head's own cache must hold this decoder's rows
        rows, length = getattr(draft_model, "num_rows", None), getattr(draft_model, "max_seq_len", None)
        if rows is not None and length is not None and (rows < max_requests + 1 or length < max_seq_len):
            raise ValueError(
                f"the head's cache has {rows} rows of {length} positions; this decoder needs {max_requests + 1} rows "
                f"of {max_seq_len}: load it with max_requests={max_requests}, max_seq_len={max_seq_len}"
            )
    target = HFCausalLM(target_model, taps=taps, **size)
    if lookup:  # n-gram proposals from the request's own tokens, rows by cache row (the scratch one last)
        ngram = getattr(generation, "max_matching_ngram_size", None) or 3
        draft_model = PromptLookupDraft(tv, max_requests + 1, max_seq_len, device, max_ngram=ngram)
    draft = _AsDraft(HFCausalLM(draft_model, **size), tv) if is_lm else _AsHead(draft_model, tv, target.dtype)
    if generation is not None:  # the decoder's stopping ids, whichever way they were chosen
        generation.eos_token_id = eos_token_id
    if penalties is None:
        penalties = (getattr(generation, "repetition_penalty", None) or 1.0) != 1.0 or any(
            getattr(generation, name, None)
            for name in ("min_new_tokens", "min_length", "no_repeat_ngram_size", "sequence_bias", "bad_words_ids")
        )
    return HFSpecDecoder(
        target,
        draft,
        num_draft_tokens=num_draft_tokens,
        max_requests=max_requests,
        max_seq_len=max_seq_len,
        vocab_size=target.vocab_size,
        draft_hidden_size=draft.hidden_size,
        hidden_dtype=draft.dtype,
        target_hidden_size=target.hidden_size,
        scratch_cache_row=max_requests,
        device=target.device,
        max_batch=max_batch,
        eos_token_id=eos_token_id,
        config=config,
        seed=seed,
        compile=compile,
        generation_config=generation,
        tokenizer=tokenizer,
        logprobs=logprobs,
        kv_cache=layout,
        penalties=penalties,
        prefill_chunk=prefill_chunk,
        logprobs_mode=logprobs_mode,
        prompt_logprobs=prompt_logprobs,
    )
