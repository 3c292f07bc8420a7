"""Sampling: per-request settings, and the sampling classes a step graph is keyed by, declared once.

A *sampling class* is what a key's graph was captured for: greedy, temperature only, a small top-k, or
any filter. Each class is declared once in :data:`CLASSES`: which requests it serves exactly
(``fits``), the options its sampling kernel takes, and a summary for the documentation and the demo's
flags. A request runs in the least general class that fits it; a batch in the most general class among
its requests (that graph serves every less general request exactly: a temperature-0 row in a
temperature batch gives the greedy token).
"""

from __future__ import annotations

import enum
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch

from stepgraph.kernels.chain_sampling import TOP_K_MAX
from stepgraph.kernels.logprobs import TOP_N_MAX

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1


def check_int64(name: str, value: object) -> int:
    """``value`` as an int, or a clear error when it is not an integer in the int64 range (seeds live in
    int64 device tensors)."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise ValueError(f"{name}={value} does not fit int64; use a value in [-2**63, 2**63 - 1]")
    return int(value)


#: The penalty fields of :class:`SamplingParams` (:mod:`stepgraph.speculative.penalties`), and their values
#: when off.
PENALTY_FIELDS = ("repetition_penalty", "presence_penalty", "frequency_penalty")
NEUTRAL = (1.0, 0.0, 0.0)

#: The most tokens one request's ``logit_bias`` may bias (a device table of this width per relay slot).
MAX_LOGIT_BIAS = 1024
#: The most sequences one request's ``bad_words_ids`` may hold, and the most tokens in each (a power of two: the
#: width of the kernel's table of words).
MAX_BAD_WORDS = 128
MAX_BAD_WORD_LEN = 16

#: The largest top-k of the ``TOP_K`` class: what its kernels' small top-k path handles.
SMALL_TOP_K_MAX = TOP_K_MAX


class Sampling(enum.IntEnum):
    """Sampling class of a batch, ordered from least to most general.

    A batch that mixes classes uses the most general one present: its graph handles every less general
    request exactly (a temperature-0 row inside a TEMPERATURE batch gives the greedy result).

    ``TOP_K``: a top-k of 1 to :data:`SMALL_TOP_K_MAX`, with or without top-p and min-p (its kernels look
    for the kept set among the top-k candidates only). ``TOP_K_TOP_P``: min-p without a top-k or top-p (the
    kernels weigh each row's kept set). ``TOP_P``: top-p without a top-k, or a larger top-k without top-p
    (min-p allowed), and everything before: these rows draw their token by a rising pivot and never look for
    their top-p cut, so they cost a fraction of a cut-off search; in the same launches the rows of ``TOP_K``
    requests find their cut as their own class does, so a batch that mixes the two (chat traffic) takes no
    top-p search either. ``GENERAL``: a top-k above :data:`SMALL_TOP_K_MAX` with top-p too, and everything
    before: such a request first finds its top-k cut, in launches that the others do not need, then draws
    by the pivot from there.
    """

    GREEDY = 0
    TEMPERATURE = 1
    TOP_K = 2
    TOP_K_TOP_P = 3
    TOP_P = 4
    GENERAL = 5

    def __str__(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, value: str | int | Sampling) -> Sampling:
        """A class from itself, its name (``"greedy"``, ``"top-k-top-p"``, any case) or its number.

        Raises
        ------
        ValueError
            For an unknown name or number, or a value of another type (``None`` included).
        """
        if isinstance(value, Sampling):
            return value
        names = ", ".join(str(s) for s in cls)
        if isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value < len(cls):
                raise ValueError(f"unknown sampling class {value}; use one of: {names} (or 0..{len(cls) - 1})")
            return cls(value)
        if not isinstance(value, str):
            raise ValueError(f"sampling must be a Sampling, its name or number, got {value!r}; use one of: {names}")
        try:
            return cls[value.strip().upper().replace("-", "_")]
        except KeyError:
            raise ValueError(f"unknown sampling class {value!r}; use one of: {names}") from None

    @classmethod
    def most_general(cls, classes: Iterable[Sampling]) -> Sampling:
        """The most general class among ``classes`` (GREEDY for none)."""
        return max((cls(c) for c in classes), default=cls.GREEDY)


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling settings.

    ``temperature == 0`` is greedy. ``top_k == 0`` means no top-k filter, ``top_p == 1`` no top-p filter,
    ``min_p == 0`` no min-p filter (min-p keeps tokens at least ``min_p`` times as probable as the most
    probable one). A top-k of 1 to 1024 puts the request in the ``TOP_K`` class (top-p and min-p may come
    with it); top-p without a top-k, or a larger top-k without top-p, in the ``TOP_P`` class; a larger top-k
    with top-p in the ``GENERAL`` class; min-p alone in the ``TOP_K_TOP_P`` class.
    ``seed`` makes the request's random stream reproducible (``None``: drawn from the run's seed).

    Penalties (:mod:`stepgraph.speculative.penalties`; a decoder built with ``penalties=True``):
    ``repetition_penalty`` (Hugging Face's, ``> 0``; 1 disables it) over the prompt's and the output's
    tokens, ``presence_penalty`` and ``frequency_penalty`` (the OpenAI API's, in ``[-2, 2]``; 0 disables
    them) over the output's. ``min_tokens`` (vLLM's name; Hugging Face's ``min_new_tokens``): the request's
    EOS ids cannot be drawn before it has this many new tokens (their logits are ``-inf`` until then).
    ``no_repeat_ngram_size`` (Hugging Face's): no n-gram of this size occurs twice in prompt and output (a
    token that would complete one already there gets ``-inf``).
    ``logit_bias`` (the OpenAI API's): ``{token id: bias}``, at most :data:`MAX_LOGIT_BIAS` of them, each
    bias added to that token's logit before the penalties (as vLLM and transformers'
    ``SequenceBiasLogitsProcessor`` order them); a bias is a finite number, or ``-inf`` to ban the token.
    It is kept as ``((id, bias), ...)`` sorted by id, without the biases of 0.
    ``bad_words_ids`` (transformers' definition; vLLM's ``bad_words``, as token ids): token sequences the
    request never emits, at most :data:`MAX_BAD_WORDS` of at most :data:`MAX_BAD_WORD_LEN` tokens. The last
    token of each gets ``-inf`` wherever the request's tokens end with the ones before it (a single token:
    always), after the penalties. Kept as a tuple of tuples.

    ``allowed_token_ids`` (vLLM's): the only tokens the request may emit; every other token gets a bias of
    ``-inf`` (so the penalties and bans leave it there). ``None``: every token. Kept sorted, without repeats.

    Stops (vLLM's names; checked on the host, no penalty state needed): ``stop_token_ids`` end the request
    as its EOS ids do, the stop token kept, with ``finish_reason`` ``"stop"``; ``ignore_eos`` leaves the
    decoder's EOS ids free, so the request runs to its length or a stop token. With ``min_tokens`` the
    stop tokens are held back too, as the EOS ids are (at most
    :data:`stepgraph.speculative.penalties.MAX_BANNED` ids in all). Kept as a tuple, without repeats.

    Log-probabilities (vLLM's names), from a decoder built with ``logprobs`` / ``prompt_logprobs``:
    ``logprobs=n`` gives each output token's log-probability and its ``n`` most probable alternatives
    (``0``: none), ``prompt_logprobs=n`` the same for the prompt's tokens; at most what the decoder computes.
    ``None`` takes the decoder's number. Only what the host keeps changes, not the step.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    min_tokens: int = 0
    no_repeat_ngram_size: int = 0
    logit_bias: Mapping[int, float] | tuple[tuple[int, float], ...] = ()
    bad_words_ids: Iterable[Iterable[int]] = ()
    stop_token_ids: Iterable[int] = ()
    ignore_eos: bool = False
    allowed_token_ids: Iterable[int] | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "logit_bias", _logit_bias(self.logit_bias))
        object.__setattr__(self, "bad_words_ids", _bad_words(self.bad_words_ids))
        object.__setattr__(self, "stop_token_ids", _token_id_list("stop_token_ids", self.stop_token_ids))
        if self.allowed_token_ids is not None:
            allowed = tuple(sorted(_token_id_list("allowed_token_ids", self.allowed_token_ids)))
            if not allowed:
                raise ValueError("allowed_token_ids=[] would allow no token; give at least one id, or None for all")
            object.__setattr__(self, "allowed_token_ids", allowed)
        if not isinstance(self.ignore_eos, bool):
            raise TypeError(f"ignore_eos must be True or False, got {self.ignore_eos!r}")
        for name in ("temperature", "top_p", "min_p", *PENALTY_FIELDS):
            value = getattr(self, name)
            if not isinstance(value, numbers.Real) or isinstance(value, bool):
                raise TypeError(f"{name} must be a number, got {value!r}")
        if not isinstance(self.top_k, numbers.Integral) or isinstance(self.top_k, bool):
            raise TypeError(f"top_k must be an int (0 disables it), got {self.top_k!r}")
        check_int64("top_k", self.top_k)
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            is_int = isinstance(value, numbers.Integral) and not isinstance(value, bool)
            if value is not None and not (is_int and 0 <= value <= TOP_N_MAX):
                raise ValueError(f"{name} must be None (the decoder's) or a number of alternatives, 0..{TOP_N_MAX}; "
                                 f"got {value!r}")  # fmt: skip
        for name in ("min_tokens", "no_repeat_ngram_size"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                raise TypeError(f"{name} must be an int (0 disables it), got {value!r}")
            if not 0 <= value <= INT32_MAX:
                raise ValueError(f"{name} must be in [0, 2**31 - 1] (0 disables it), got {value}")
        if self.seed is not None:
            check_int64("seed", self.seed)
        if not (self.temperature >= 0.0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not (0.0 <= self.min_p <= 1.0):
            raise ValueError(f"min_p must be in [0, 1] (0 disables it), got {self.min_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not (self.repetition_penalty > 0.0 and math.isfinite(self.repetition_penalty)):
            raise ValueError(
                f"repetition_penalty must be a finite number > 0 (1 disables it), got {self.repetition_penalty}"
            )
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2.0 <= getattr(self, name) <= 2.0:
                raise ValueError(f"{name} must be in [-2, 2] (0 disables it), got {getattr(self, name)}")

    @property
    def penalised(self) -> bool:
        """Whether any penalty is set (the decoder must be built with ``penalties=True``)."""
        return self.penalties() != NEUTRAL

    @property
    def needs_penalty_state(self) -> str | None:
        """The first of these settings that needs the decoder's penalty state (``penalties=True``): a
        penalty, ``min_tokens``, ``no_repeat_ngram_size``, ``logit_bias``, ``bad_words_ids`` or
        ``allowed_token_ids``; ``None`` if none does."""
        fields = ("min_tokens", "no_repeat_ngram_size", "logit_bias", "bad_words_ids", "allowed_token_ids")
        for name in (*PENALTY_FIELDS, *fields):
            if getattr(self, name) != getattr(SamplingParams, name):
                return name
        return None

    def penalties(self) -> tuple[float, float, float]:
        """``(repetition, presence, frequency)``, the columns of the penalty state's settings."""
        return tuple(float(getattr(self, name)) for name in PENALTY_FIELDS)

    @property
    def sampling(self) -> Sampling:
        """The least general class whose step serves these settings exactly (see :data:`CLASSES`)."""
        return class_of(self)

    def stops(self, eos: Sequence[int]) -> tuple[int, ...]:
        """The ids that end this request: the decoder's ``eos`` (unless ``ignore_eos``), then its
        ``stop_token_ids``, without repeats."""
        return tuple(dict.fromkeys((*(() if self.ignore_eos else eos), *self.stop_token_ids)))

    def request_values(self) -> dict[str, float | int]:
        """The values a request carries on the device for its sampling (:data:`REQUEST_FIELDS`)."""
        return {name: getattr(self, name) for name in REQUEST_FIELDS}


def _logit_bias(value) -> tuple[tuple[int, float], ...]:
    """``logit_bias`` checked, as ``((id, bias), ...)`` sorted by id without the biases of 0."""
    pairs = list(value.items()) if isinstance(value, Mapping) else value
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Iterable):
        raise TypeError(f"logit_bias must be a mapping {{token id: bias}}, got {value!r}")
    out: dict[int, float] = {}
    for pair in pairs:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"logit_bias must be a mapping {{token id: bias}} or (id, bias) pairs; got {pair!r}")
        token, bias = pair
        if not isinstance(token, numbers.Integral) or isinstance(token, bool) or not 0 <= token <= INT32_MAX:
            raise ValueError(f"logit_bias keys must be token ids (ints >= 0), got {token!r}")
        if not isinstance(bias, numbers.Real) or isinstance(bias, bool) or not (math.isfinite(bias) or bias < 0):
            raise ValueError(f"logit_bias[{token}] must be a finite number or -inf (a ban), got {bias!r}")
        if int(token) in out:
            raise ValueError(f"logit_bias names token {token} twice")
        out[int(token)] = float(bias)
    kept = tuple(sorted((t, b) for t, b in out.items() if b != 0.0))
    if len(kept) > MAX_LOGIT_BIAS:
        raise ValueError(f"logit_bias biases at most {MAX_LOGIT_BIAS} tokens a request, got {len(kept)}")
    return kept


def _bad_words(value) -> tuple[tuple[int, ...], ...]:
    """``bad_words_ids`` checked, as a tuple of tuples."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"bad_words_ids must be a list of token id lists, got {value!r}")
    words = []
    for word in value:
        if isinstance(word, (str, bytes)) or not isinstance(word, Iterable):
            raise TypeError(f"bad_words_ids must be a list of token id lists; got the entry {word!r}")
        word = tuple(word.tolist() if hasattr(word, "tolist") else word)  # a tensor or an array of ids too
        if not 1 <= len(word) <= MAX_BAD_WORD_LEN:
            raise ValueError(f"each of bad_words_ids must hold 1 to {MAX_BAD_WORD_LEN} token ids, got {list(word)}")
        for t in word:
            if not isinstance(t, numbers.Integral) or isinstance(t, bool) or not 0 <= t <= INT32_MAX:
                raise ValueError(f"bad_words_ids must hold token ids (ints >= 0), got {t!r} in {list(word)}")
        words.append(tuple(int(t) for t in word))
    if len(words) > MAX_BAD_WORDS:
        raise ValueError(f"bad_words_ids holds at most {MAX_BAD_WORDS} sequences a request, got {len(words)}")
    return tuple(words)


def _token_id_list(name: str, value) -> tuple[int, ...]:
    """A list of token ids checked (a list, tuple, tensor or array), as a tuple without repeats (in the
    order given)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a list of token ids, got {value!r}")
    ids = value.tolist() if hasattr(value, "tolist") else list(value)
    if not isinstance(ids, list):
        raise TypeError(f"{name} must be a list of token ids, got {value!r}")
    for t in ids:
        if not isinstance(t, numbers.Integral) or isinstance(t, bool) or not 0 <= t <= INT32_MAX:
            raise ValueError(f"{name} must hold token ids (ints >= 0), got {t!r}")
    return tuple(dict.fromkeys(int(t) for t in ids))


@dataclass(frozen=True)
class SamplingClass:
    """One sampling class, declared once.

    ``fits(params)``: this class's step serves requests with these settings exactly. ``kernel``: the
    options of :func:`stepgraph.kernels.chain_verify_sampling` for a batch of this class (``None``: no
    sampling kernel, greedy verify). ``summary``: one line for the documentation and ``--help``.
    ``example``: settings whose own class this is (the demo's defaults for ``--sampling`` of this class).
    """

    sampling: Sampling
    summary: str
    fits: Callable[[SamplingParams], bool]
    kernel: Mapping[str, bool] | None
    example: SamplingParams

    @property
    def name(self) -> str:
        return str(self.sampling)


def _filtered(p: SamplingParams) -> bool:
    return p.top_k > 0 or p.top_p < 1.0 or p.min_p > 0.0


def _late(p: SamplingParams) -> bool:
    """Sampled with top-p and a top-k above :data:`SMALL_TOP_K_MAX`: the kernels' late pivot requests
    (:func:`stepgraph.kernels.chain_sampling_ref.late_pivot_requests`), which find their top-k cut first."""
    return p.temperature > 0.0 and p.top_k > SMALL_TOP_K_MAX and p.top_p < 1.0


def _pivot(p: SamplingParams) -> bool:
    """Sampled top-p without a top-k, or a top-k above :data:`SMALL_TOP_K_MAX`: the kernels' pivot requests
    (:func:`stepgraph.kernels.chain_sampling_ref.pivot_requests`)."""
    return p.temperature > 0.0 and ((p.top_k == 0 and p.top_p < 1.0) or p.top_k > SMALL_TOP_K_MAX)


#: Every sampling class, least general first (the order of :class:`Sampling`).
CLASSES: tuple[SamplingClass, ...] = (
    SamplingClass(Sampling.GREEDY, "argmax (temperature 0)", lambda p: p.temperature == 0.0, None, SamplingParams()),
    SamplingClass(
        Sampling.TEMPERATURE,
        "temperature, no filter",
        lambda p: p.temperature == 0.0 or not _filtered(p),
        {"filtered": False, "small_top_k": False},
        SamplingParams(temperature=0.8),
    ),
    SamplingClass(
        Sampling.TOP_K,
        f"temperature with a top-k of 1 to {SMALL_TOP_K_MAX}, with or without top-p and min-p",
        lambda p: p.temperature == 0.0 or not _filtered(p) or 1 <= p.top_k <= SMALL_TOP_K_MAX,
        {"filtered": True, "small_top_k": True},
        SamplingParams(temperature=0.8, top_k=40, top_p=0.9),
    ),
    SamplingClass(
        Sampling.TOP_K_TOP_P,
        "temperature with min-p alone",
        lambda p: not _pivot(p),
        {"filtered": True, "small_top_k": False, "pivot": False},
        SamplingParams(temperature=0.8, min_p=0.1),
    ),
    SamplingClass(
        Sampling.TOP_P,
        f"temperature with top-p and no top-k, or a top-k above {SMALL_TOP_K_MAX} without top-p (min-p allowed), "
        "drawn without finding the top-p cut",
        lambda p: not _late(p),
        {"filtered": True, "small_top_k": False, "pivot": True, "late": False},
        SamplingParams(temperature=0.8, top_p=0.9),
    ),
    SamplingClass(
        Sampling.GENERAL,
        f"temperature with a top-k above {SMALL_TOP_K_MAX} and top-p (min-p allowed): the top-k cut found, then "
        "drawn from it without finding the top-p cut",
        lambda p: True,
        {"filtered": True, "small_top_k": False, "pivot": True, "late": True},
        SamplingParams(temperature=0.8, top_k=2000, top_p=0.9),
    ),
)
assert [c.sampling for c in CLASSES] == list(Sampling), "one declaration per class, in the enum's order"

#: What each request carries on the device for its sampling: field -> (dtype, the value of a padded row).
#: The relay holds one slot row of each; :meth:`SamplingParams.request_values` gives a request's values.
REQUEST_FIELDS: dict[str, tuple[torch.dtype, float | int]] = {
    "temperature": (torch.float32, 0.0),
    "top_k": (torch.int64, 0),
    "top_p": (torch.float32, 1.0),
    "min_p": (torch.float32, 0.0),
    "seed": (torch.int64, 0),
}


def sampling_class(sampling: Sampling | str | int) -> SamplingClass:
    """The declaration of ``sampling`` (a class, its name or its number)."""
    return CLASSES[Sampling.parse(sampling)]


def class_of(params: SamplingParams) -> Sampling:
    """The least general class that serves ``params`` exactly."""
    return next(c.sampling for c in CLASSES if c.fits(params))
