"""``generate()`` as a transformers user calls it: generation configs, padded ``input_ids``, text, streamers.

:class:`HFSpecDecoder` (what :func:`stepgraph.adapters.hf.hf_spec_decoder` returns) takes what
``model.generate()`` takes and honours it the same way:

* **Settings** come from the target's ``generation_config``, then a ``generation_config=`` given to the
  call (its set fields), then generate's keywords (``do_sample=True, temperature=0.7, ...``). Unset ones
  take transformers' defaults, ``top_k=50`` when sampling among them. Honoured: ``do_sample``,
  ``temperature``, ``top_k``, ``top_p``, ``min_p``, ``repetition_penalty`` (greedy or sampled, as
  transformers applies it; the decoder needs ``penalties=True``, which ``hf_spec_decoder`` turns on by
  itself for a generation config that sets one), ``min_new_tokens``, ``min_length``,
  ``no_repeat_ngram_size``, ``bad_words_ids`` and ``sequence_bias`` of single tokens (a ``logit_bias``;
  longer biased sequences are refused) (on the device with the penalties, as ``repetition_penalty``),
  ``max_new_tokens``, ``max_length``,
  ``eos_token_id``, ``pad_token_id``, ``stop_strings`` (with a tokenizer), ``return_dict_in_generate``,
  ``num_return_sequences`` (sampled: that many sequences per prompt, one after another, as transformers
  orders them).
  ``max_length`` and ``min_length`` count the prompt as transformers does: a padded ``input_ids``
  tensor's full width, or an id list's own length.
  Anything else set to a value that would change the output (beams, bad words, scores)
  raises ``ValueError`` naming it: nothing is dropped silently. Settings that only steer how transformers
  runs (``use_cache``, ``cache_implementation``, compile options) and beam-search settings without beams
  are ignored, as they change no token here.
* **Inputs**: lists of ids (new ids back, one list per prompt); a 2-D ``input_ids`` tensor with an
  optional ``attention_mask``, left or right padded (the prompt followed by the new tokens back, rows
  padded with ``pad_token_id`` as ``generate()`` pads them); or text, a string or a list of strings, with
  a ``tokenizer`` (the new text back).
* **Streaming**: ``streamer=`` a transformers streamer (``TextStreamer``, ``TextIteratorStreamer``; one
  prompt, as transformers allows) gets the prompt, then the tokens as they are accepted; ``on_tokens(i,
  tokens)`` gets every request's, in both loops.
* **Why each stopped**: with ``return_dict_in_generate=True`` the result is a :class:`HFGenerateOutput`
  with ``finish_reasons`` per request: ``"stop"`` (an EOS id, or a ``stop_token_ids`` id of ``sampling=``),
  ``"length"`` or ``"stop_string"``, and the tokens' log-probabilities when the decoder was built with
  ``logprobs=``.
"""

from __future__ import annotations

import copy
import functools
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from stepgraph.sampling import SamplingParams
from stepgraph.speculative.decoder import SpecDecoder
from stepgraph.speculative.penalties import MAX_BANNED
from stepgraph.speculative.requests import Request, normalize_eos

HONOURED = {
    "do_sample", "temperature", "top_k", "top_p", "min_p", "repetition_penalty", "max_new_tokens", "max_length",
    "min_new_tokens", "min_length", "no_repeat_ngram_size", "eos_token_id", "pad_token_id", "stop_strings",
    "return_dict_in_generate", "num_return_sequences", "sequence_bias", "bad_words_ids",
}  # fmt: skip
#: settings that change how transformers runs, not which tokens come out
IGNORED = {
    "use_cache", "cache_implementation", "cache_config", "max_cache_len", "compile_config", "disable_compile",
    "prefill_chunk_size", "low_memory", "bos_token_id", "decoder_start_token_id", "transformers_version",
    "_from_model_config", "_commit_hash", "_original_object_hash", "continuous_batching_config",
}  # fmt: skip
#: transformers' own speculation settings: they change how fast it decodes, not which tokens come out, and
#: the decoder's draft and K were fixed when it was built (``hf_spec_decoder``'s draft, ``num_draft_tokens``)
SPECULATION = {
    "num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold", "is_assistant",
    "prompt_lookup_num_tokens", "max_matching_ngram_size", "assistant_early_exit", "assistant_lookbehind",
}  # fmt: skip
IGNORED |= SPECULATION
#: beam-search settings: without beams transformers ignores them too
BEAM_ONLY = {"early_stopping", "length_penalty", "num_beam_groups", "diversity_penalty", "constraints"}
SAMPLING_SETTINGS = {
    "do_sample", "temperature", "top_k", "top_p", "min_p", "repetition_penalty", "min_new_tokens",
    "no_repeat_ngram_size", "sequence_bias", "bad_words_ids",
}  # fmt: skip
FINISH_REASONS = {"eos": "stop", "length": "length", "stop": "stop_string"}


@dataclass
class HFGenerateOutput:
    """What ``generate(..., return_dict_in_generate=True)`` returns.

    ``sequences``: what ``generate()`` returns without it (a tensor, id lists or text); ``new_tokens``: each
    request's new ids; ``finish_reasons``: each request's ``"stop"``, ``"length"`` or ``"stop_string"``; with a
    decoder built with ``logprobs=n``, ``logprobs`` (each new token's, under the target's raw distribution, or
    with ``logprobs_mode="processed"`` the one it was drawn from) and ``top_logprobs`` (its ``n`` alternatives,
    ``[(token, logprob), ...]``) per request; with one built with ``prompt_logprobs=n``, ``prompt_logprobs``
    and ``prompt_top_logprobs`` per request (its prompt's tokens, padding left out; ``None`` at the first).
    """

    sequences: Any
    new_tokens: list[list[int]]
    finish_reasons: list[str]
    logprobs: list[list[float]] | None = None
    top_logprobs: list[list[list[tuple[int, float]]]] | None = None
    prompt_logprobs: list[list[float | None]] | None = None
    prompt_top_logprobs: list[list[list[tuple[int, float]] | None]] | None = None


def _finish_reason(request: Request) -> str:
    """``finish_reasons``' name for why ``request`` ended (a stop token of its ``SamplingParams`` is
    ``"stop"``, as an EOS id)."""
    if request.finish_reason == "stop" and request.output[-1] in request.params.stop_token_ids:
        return "stop"
    return FINISH_REASONS[request.finish_reason]


def generation_settings(model_config, generation_config=None, **kwargs) -> dict[str, Any]:
    """The settings a call runs with, as ``model.generate()`` merges them: the model's
    ``generation_config``, then ``generation_config``'s set fields, then ``kwargs``, then transformers'
    defaults. Returns a dict of the honoured fields.

    Raises
    ------
    TypeError
        For a keyword that is no generation setting.
    ValueError
        For a setting that would change the output and that the adapter cannot honour, naming it.
    """
    from transformers import GenerationConfig

    merged: dict[str, Any] = {}
    for source in (model_config, generation_config):
        if source is not None:
            merged.update({k: v for k, v in source.to_dict().items() if v is not None})
    known = set(GenerationConfig().to_dict())
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(f"generate() got keywords that are no generation settings: {', '.join(unknown)}")
    merged.update({k: v for k, v in kwargs.items() if v is not None})
    _refuse_unservable(merged)
    token_biases(merged)  # sequences it cannot bias are refused when given
    SamplingParams(bad_words_ids=_bad_words(merged))  # and bad words it cannot hold
    defaults = _transformers_defaults()
    return {
        **{k: v for k, v in defaults.items() if k in HONOURED},
        **{k: v for k, v in merged.items() if k in HONOURED},
    }


def _refuse_unservable(merged: dict[str, Any]) -> None:
    neutral = _transformers_defaults()
    beams = merged.get("num_beams") or 1
    bad = []
    for name, value in sorted(merged.items()):
        if name in HONOURED or name in IGNORED or (name in BEAM_ONLY and beams == 1):
            continue
        if value is None or value == neutral.get(name) or value in ({}, [], False):
            continue
        off = f" (pass {name}={neutral[name]!r} to turn it off)" if neutral.get(name) is not None else ""
        bad.append(f"{name}={value!r}{off}")
    if bad:
        raise ValueError(
            f"generation settings the stepgraph adapter cannot honour: {'; '.join(bad)}. Unset them in the model's "
            "generation_config or override them in the call, or use model.generate() for them: beams and scores "
            "are not implemented yet"
        )


@functools.cache
def _transformers_defaults() -> dict[str, Any]:
    """What transformers runs a setting at when no config sets it: ``GenerationConfig()``'s values (4.x),
    overlaid by ``generate()``'s global defaults (5.x: ``max_length=20``, ``top_k=50``, ...)."""
    from transformers import GenerationConfig

    get = getattr(GenerationConfig, "_get_default_generation_params", None)
    own = {k: v for k, v in GenerationConfig().to_dict().items() if v is not None}
    return {**own, **(get() if get is not None else {})}


def sampling_params(settings: dict[str, Any]) -> SamplingParams:
    """The :class:`SamplingParams` of resolved ``settings`` (greedy unless ``do_sample``; the repetition
    penalty, ``min_new_tokens``, ``no_repeat_ngram_size``, ``sequence_bias`` and ``bad_words_ids`` either
    way, as transformers applies them: a bad word that is an EOS id is dropped, as transformers drops it)."""
    processed = {
        "repetition_penalty": float(settings.get("repetition_penalty") or 1.0),
        "min_tokens": int(settings.get("min_new_tokens") or 0),
        "no_repeat_ngram_size": int(settings.get("no_repeat_ngram_size") or 0),
        "logit_bias": token_biases(settings),
        "bad_words_ids": _bad_words(settings),
    }
    if not settings["do_sample"]:
        return SamplingParams(**processed)
    t = float(settings["temperature"])
    if t <= 0.0:
        raise ValueError(f"do_sample=True with temperature={t}: give a temperature > 0, or do_sample=False")
    return SamplingParams(
        temperature=t,
        top_k=int(settings["top_k"] or 0),
        top_p=float(settings["top_p"]),
        min_p=float(settings.get("min_p") or 0.0),
        **processed,
    )


def token_biases(settings: dict[str, Any]) -> dict[int, float]:
    """``settings``' ``sequence_bias`` as a ``logit_bias``, as transformers applies it to single tokens.

    Raises
    ------
    ValueError
        For a biased sequence of more than one token, naming it.
    """
    bias: dict[int, float] = {}
    given = settings.get("sequence_bias") or {}
    for entry in given.items() if isinstance(given, dict) else given:
        shaped = isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[0], (list, tuple))
        if not shaped or not isinstance(entry[1], numbers.Real) or isinstance(entry[1], bool):
            raise ValueError(f"sequence_bias maps token id sequences to numbers; got the entry {entry!r}")
        ids, value = entry
        if len(ids) != 1:
            raise ValueError(f"sequence_bias of {list(ids)}: only single tokens can be biased here, not sequences")
        bias[ids[0]] = bias.get(ids[0], 0.0) + value  # SamplingParams checks the ids and biases
    return bias


def _bad_words(settings: dict[str, Any]) -> list[list[int]]:
    """``settings``' ``bad_words_ids`` but those of one EOS id (which transformers drops)."""
    eos = settings.get("eos_token_id")
    eos = set(eos) if isinstance(eos, (list, tuple, set)) else {eos}
    words = settings.get("bad_words_ids") or ()
    if not isinstance(words, (list, tuple)):
        return words  # SamplingParams names what is wrong with it
    return [w for w in words if not (isinstance(w, (list, tuple)) and len(w) == 1 and w[0] in eos)]


def prompts_of(inputs, attention_mask=None, tokenizer=None) -> tuple[list[list[int]], str]:
    """``(prompts, kind)``: the token-id lists of ``inputs`` and how they came (``"ids"``, ``"tensor"``,
    ``"text"`` or ``"texts"``). A 2-D ``input_ids`` ``[B, S]`` keeps the positions its ``attention_mask``
    ``[B, S]`` marks (1: token, 0: padding), on either side."""
    if isinstance(inputs, str) or (
        isinstance(inputs, (list, tuple)) and inputs and all(isinstance(t, str) for t in inputs)
    ):
        if tokenizer is None:
            raise ValueError("text prompts need a tokenizer: pass tokenizer=... to hf_spec_decoder or generate()")
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        return [tokenizer(t).input_ids for t in texts], "text" if isinstance(inputs, str) else "texts"
    if isinstance(inputs, torch.Tensor) and inputs.dim() == 2:
        if inputs.dtype.is_floating_point or inputs.dtype == torch.bool:
            raise ValueError(f"input_ids must be of an integer dtype, got {inputs.dtype}")
        if attention_mask is None:
            return [row.tolist() for row in inputs], "tensor"
        if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != inputs.shape:
            got = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else type(attention_mask)
            raise ValueError(f"attention_mask must be a tensor of input_ids' shape {tuple(inputs.shape)}, got {got}")
        keep = attention_mask.to(torch.bool).cpu()
        return [row[m].tolist() for row, m in zip(inputs.cpu(), keep)], "tensor"
    if attention_mask is not None:
        raise ValueError("attention_mask goes with a 2-D input_ids tensor; lists of ids need none")
    return list(inputs), "ids"


class StopStrings:
    """``stop(output)``: whether one of ``strings`` has just appeared in the text of ``output`` (new ids),
    overlapping its last token, as transformers' ``StopStringCriteria`` stops: the completing token is
    kept, and a string the last token reaches into counts (``["st", "opera"]`` stops at ``"stop"``)."""

    def __init__(self, tokenizer, strings: str | Sequence[str]) -> None:
        self.tokenizer = tokenizer
        self.strings = [strings] if isinstance(strings, str) else list(strings)
        if not self.strings or not all(isinstance(s, str) and s for s in self.strings):
            raise ValueError(f"stop_strings must be non-empty strings, got {strings!r}")
        self.tail = max(len(s) for s in self.strings) + 1  # tokens: every one holds at least a character

    def __call__(self, output: list[int]) -> bool:
        tail = output[-self.tail :]
        text = self.tokenizer.decode(tail, skip_special_tokens=False)
        before = len(self.tokenizer.decode(tail[:-1], skip_special_tokens=False))
        return any(s in text[max(0, before - len(s) + 1) :] for s in self.strings)


class HFSpecDecoder(SpecDecoder):
    """A :class:`SpecDecoder` over Hugging Face models whose :meth:`generate` takes what
    ``model.generate()`` takes (module docstring). ``generation_config``: the target's, copied at
    construction; ``tokenizer``: for text in and out and ``stop_strings`` (optional)."""

    def __init__(self, *args, generation_config=None, tokenizer=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.generation_config = copy.deepcopy(generation_config)
        self.tokenizer = tokenizer

    def generate(
        self,
        inputs=None,
        generation_config=None,
        *,
        attention_mask: torch.Tensor | None = None,
        input_ids=None,
        max_new_tokens: int | Sequence[int] | None = None,
        sampling: SamplingParams | Sequence[SamplingParams] | None = None,
        tokenizer=None,
        streamer=None,
        on_tokens: Callable[[int, list[int]], None] | None = None,
        overlap: bool = False,
        on_step: Callable[[int], None] | None = None,
        arrivals: Sequence[float] | None = None,
        **kwargs,
    ):
        """Generate as ``model.generate()`` would (module docstring), speculatively, in the step graph.

        ``inputs`` (or ``input_ids``): id lists, a 2-D tensor ``[B, S]`` with ``attention_mask`` ``[B, S]``,
        or text. ``max_new_tokens``: one for all or one per prompt (default: the settings'). ``kwargs``:
        generate's other keywords (``do_sample``, ``temperature``, ``top_p``, ``stop_strings``, ...).
        ``sampling``: :class:`SamplingParams` (one, or one per prompt) in place of the sampling settings.
        ``overlap``, ``on_step``, ``arrivals``, ``on_tokens``: as :meth:`SpecDecoder.generate`.

        Returns
        -------
        The new ids of each prompt (id lists in); ``[B, S + N]`` ids (a tensor in: the input, then the new
        tokens padded with ``pad_token_id``); the new text (text in); or an :class:`HFGenerateOutput` of
        one of those with ``return_dict_in_generate=True``.
        """
        if input_ids is not None:
            if inputs is not None:
                raise ValueError("give the prompts once: inputs or input_ids")
            inputs = input_ids
        if inputs is None:
            raise ValueError("generate() needs prompts: ids, a 2-D input_ids tensor or text")
        if sampling is not None and set(kwargs) & SAMPLING_SETTINGS:
            both = ", ".join(sorted(set(kwargs) & SAMPLING_SETTINGS))
            raise ValueError(f"give sampling=SamplingParams(...) or {both}, not both")
        per_prompt = isinstance(max_new_tokens, (list, tuple))
        settings = generation_settings(
            self.generation_config,
            generation_config,
            **kwargs,
            **({} if per_prompt else {"max_new_tokens": max_new_tokens}),
        )
        tokenizer = tokenizer if tokenizer is not None else self.tokenizer
        prompts, kind = prompts_of(inputs, attention_mask, tokenizer)
        # the prompt lengths max_length and min_length count: a padded tensor's width, as transformers counts
        widths = [inputs.shape[1]] * len(prompts) if kind == "tensor" else [len(p) for p in prompts]
        limits = list(max_new_tokens) if per_prompt else _max_new_tokens(settings, widths)
        params = _min_length(settings, sampling_params(settings) if sampling is None else sampling, widths)
        prompts, limits, params, copies = _return_sequences(settings, prompts, limits, params)
        if copies > 1:
            kind = "texts" if kind == "text" else kind
            inputs = inputs.repeat_interleave(copies, 0) if kind == "tensor" else inputs
        requests = self.make_requests(prompts, limits, params)
        self._set_stops(requests, settings, tokenizer)
        _set_streams(requests, on_tokens, streamer, prompts)
        self.serve(requests, overlap=overlap, on_step=on_step, arrivals=arrivals)
        if streamer is not None:
            streamer.end()
        new = [r.output for r in requests]
        sequences = self._shaped(new, inputs, kind, settings, tokenizer)
        if settings.get("return_dict_in_generate"):
            reasons = [_finish_reason(r) for r in requests]
            out = HFGenerateOutput(sequences, new, reasons)
            if self.logprobs is not None:
                out.logprobs, out.top_logprobs = [r.logprobs for r in requests], [r.top_logprobs for r in requests]
            if self.prompt_logprobs is not None:
                out.prompt_logprobs = [r.prompt_logprobs for r in requests]
                out.prompt_top_logprobs = [r.prompt_top_logprobs for r in requests]
            return out
        return sequences

    def _set_stops(self, requests: list[Request], settings: dict, tokenizer) -> None:
        eos = normalize_eos(settings.get("eos_token_id"), self.vocab_size)
        strings = settings.get("stop_strings")
        if strings and tokenizer is None:
            raise ValueError("stop_strings need a tokenizer: pass tokenizer=... to hf_spec_decoder or generate()")
        stop = StopStrings(tokenizer, strings) if strings else None
        stops = [r.params.stops(eos) for r in requests]
        if any(r.params.min_tokens and len(ids) > MAX_BANNED for r, ids in zip(requests, stops)):
            raise ValueError(f"min_new_tokens holds back at most {MAX_BANNED} EOS ids; eos_token_id has {len(eos)}")
        for r, ids in zip(requests, stops):
            r.eos, r.stop = ids, stop

    def _shaped(self, new: list[list[int]], inputs, kind: str, settings: dict, tokenizer):
        if kind == "ids":
            return new
        if kind in ("text", "texts"):
            texts = [tokenizer.decode(n, skip_special_tokens=True) for n in new]
            return texts[0] if kind == "text" else texts
        pad = settings.get("pad_token_id")
        if pad is None:  # generate() pads with the first EOS id then
            eos = normalize_eos(settings.get("eos_token_id"), self.vocab_size)
            pad = eos[0] if eos else 0
        out = torch.full((len(new), max(map(len, new))), int(pad), dtype=inputs.dtype)
        for i, n in enumerate(new):
            out[i, : len(n)] = torch.tensor(n, dtype=inputs.dtype)
        return torch.cat([inputs.cpu(), out], 1).to(inputs.device)


def _return_sequences(settings: dict, prompts, limits: list[int], params):
    """``(prompts, limits, params, n)`` with each prompt ``n = num_return_sequences`` times in a row (its
    limit and settings with it); a copy after the first of a seeded request gets a seed of its own, so
    the ``n`` samples differ and the first is the one a single sequence would be.

    Raises
    ------
    ValueError
        For ``n > 1`` with a greedy request (every copy would be the same; transformers refuses it too).
    """
    n = int(settings.get("num_return_sequences") or 1)
    if n < 1:
        raise ValueError(f"num_return_sequences must be >= 1, got {n}")
    per = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
    if n == 1 or len(limits) != len(prompts) or len(per) != len(prompts):  # make_requests names a mismatch
        return prompts, limits, params, 1
    if any(p.temperature == 0.0 for p in per):
        raise ValueError(
            f"num_return_sequences={n} needs sampling (do_sample=True, or a SamplingParams with a temperature): "
            "greedy decoding gives one sequence per prompt"
        )

    def copy_of(p: SamplingParams, j: int) -> SamplingParams:
        return p if j == 0 or p.seed is None else replace(p, seed=(p.seed * 1_000_003 + j) % 2**63)

    rows = [(prompt, limit, copy_of(p, j)) for prompt, limit, p in zip(prompts, limits, per) for j in range(n)]
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], n


def _set_streams(requests: list[Request], on_tokens, streamer, prompts: list[list[int]]) -> None:
    """Each request's ``on_tokens``: the caller's callback (with its index) and the streamer."""
    if streamer is not None:
        if len(requests) != 1:
            raise ValueError(f"a streamer takes one prompt (transformers' rule), got {len(requests)}")
        streamer.put(torch.tensor([prompts[0]]))
    for i, r in enumerate(requests):
        hooks = [functools.partial(on_tokens, i)] if on_tokens is not None else []
        if streamer is not None:
            hooks.append(lambda tokens: streamer.put(torch.tensor(tokens)))
        if hooks:
            r.on_tokens = functools.partial(_call_each, hooks)


def _call_each(hooks: list[Callable[[list[int]], None]], tokens: list[int]) -> None:
    for hook in hooks:
        hook(tokens)


def _max_new_tokens(settings: dict, widths: list[int]) -> list[int]:
    """``max_new_tokens``, or ``max_length`` less each prompt's length ``widths`` (transformers' rule)."""
    if settings.get("max_new_tokens") is not None:
        return [int(settings["max_new_tokens"])] * len(widths)
    limits = [int(settings["max_length"]) - w for w in widths]
    if min(limits, default=1) < 1:
        raise ValueError(
            f"max_length={settings['max_length']} leaves no room after a prompt of {max(widths)} tokens; "
            "pass max_new_tokens=..."
        )
    return limits


def _min_length(settings: dict, params, widths: list[int]):
    """``params`` (one or per prompt) with ``min_length`` applied as transformers' ``MinLengthLogitsProcessor``
    applies it: EOS held back until prompt (``widths``) and output together reach it, on top of
    ``min_new_tokens``."""
    min_length = int(settings.get("min_length") or 0)
    if min_length <= 0:
        return params
    per = [params] * len(widths) if isinstance(params, SamplingParams) else list(params)
    if len(per) != len(widths):  # make_requests names the mismatch
        return params
    return [replace(p, min_tokens=max(p.min_tokens, min_length - w)) for p, w in zip(per, widths)]
