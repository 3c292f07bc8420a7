"""Generation requests: what one carries, how its stopping rule applies, and the checks made when one is
given (prompt ids, lengths, seeds, EOS ids)."""

from __future__ import annotations

import numbers
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import torch

from stepgraph.kv import KVCache
from stepgraph.sampling import INT64_MAX, SamplingParams
from stepgraph.speculative.penalties import MAX_BANNED, check_some_token_left, check_token_ids

GREEDY = SamplingParams()


#: how many times :meth:`Request.abort` was called in this process: a loop looks for aborted requests only
#: when it changed, not at every step
ABORTS = [0]


@dataclass
class Request:
    """One generation request and its progress (``slot``/``cache_row`` are -1 while it holds none).

    ``on_tokens(tokens)`` is called with the tokens it takes, as it takes them (streaming); ``stop(output)``
    is asked after each token and ends the request when true (``finish_reason`` ``"stop"``);
    ``on_finish(request)`` is called once it has finished, after its last ``on_tokens``, whatever ended it
    (:meth:`abort` included). All run on the serving thread, between steps.

    ``eos``: the ids that end it, kept as its last token (the decoder's EOS ids unless
    ``params.ignore_eos``, and ``params.stop_token_ids``; ``finish_reason`` ``"eos"``, or ``"stop"`` for a
    stop token). With a decoder that reports log-probabilities, ``logprobs[i]`` is ``output[i]``'s and
    ``top_logprobs[i]`` its alternatives, ``[(token, logprob), ...]``. With one built with
    ``prompt_logprobs``, ``prompt_logprobs[i]`` is ``prompt[i]``'s under the target's raw logits after
    ``prompt[:i]`` and ``prompt_top_logprobs[i]`` the alternatives there (``None`` for ``i = 0``)."""

    id: int
    prompt: list[int]
    max_new_tokens: int
    params: SamplingParams
    eos: tuple[int, ...] = ()
    arrival: float = 0.0  # seconds after generate() starts at which it may join a batch
    output: list[int] = field(default_factory=list)
    slot: int = -1
    cache_row: int = -1
    finished: bool = False
    finish_reason: str | None = None  # "eos", "length", "stop" (a stop token or stop()) or "abort"
    on_tokens: Callable[[list[int]], None] | None = None
    stop: Callable[[list[int]], bool] | None = None
    on_finish: Callable[[Request], None] | None = None
    # the emitted tokens' scores as the steps gave them, (host arrays or lists, tokens taken), turned into
    # the lists of logprobs and top_logprobs when either is read: a step's loop only keeps references
    _step_scores: list[tuple] = field(default_factory=list, repr=False, compare=False)
    _logprobs: list[float] = field(default_factory=list, repr=False, compare=False)
    _top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list, repr=False, compare=False)
    _scores_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    # the prompt's scores as the prefill's forwards gave them (host arrays), made lists when read, and
    # those on their way to the host: (holder, row, positions), taken by take_prompt_scores()
    _prompt_parts: list[tuple] = field(default_factory=list, repr=False, compare=False)
    _prompt_logprobs: list[float | None] = field(default_factory=list, repr=False, compare=False)
    _prompt_top_logprobs: list[list[tuple[int, float]] | None] = field(default_factory=list, repr=False, compare=False)
    prompt_pending: list[tuple] = field(default_factory=list, repr=False)
    prefilled: int = 0  # prompt positions in the cache (a chunked prefill's progress)
    room: int = 0  # positions its cache row holds (the allocator's; it asks for more past this)
    prefill_carry: torch.Tensor | None = field(default=None, repr=False)  # the target's hidden at prefilled - 1
    # a chunked prefill's first token on its way to the host: (FirstTokens, row), taken by settle()
    first_pending: tuple | None = field(default=None, repr=False)
    aborted: bool = False  # abort() was called: the loop ends it at its next turn

    @property
    def logprobs(self) -> list[float]:
        """Each output token's log-probability (a decoder built with ``logprobs``; else empty)."""
        return self._take_scores()[0]

    @property
    def top_logprobs(self) -> list[list[tuple[int, float]]]:
        """Each output token's most probable alternatives, ``[(token, logprob), ...]``."""
        return self._take_scores()[1]

    @property
    def prompt_logprobs(self) -> list[float | None]:
        """Each prompt token's log-probability after the tokens before it (``None`` for the first; a decoder
        built with ``prompt_logprobs``, else empty)."""
        return self._take_prompt_scores()[0]

    @property
    def prompt_top_logprobs(self) -> list[list[tuple[int, float]] | None]:
        """Each prompt position's most probable alternatives, ``[(token, logprob), ...]`` (``None`` for the
        first)."""
        return self._take_prompt_scores()[1]

    def _take_scores(self) -> tuple[list[float], list[list[tuple[int, float]]]]:
        """The step scores kept so far, as lists (first the request's own number of alternatives)."""
        with self._scores_lock:
            _extend(self._logprobs, self._top_logprobs, self._step_scores, self.params.logprobs)
            return self._logprobs, self._top_logprobs

    def _take_prompt_scores(self) -> tuple[list[float | None], list[list[tuple[int, float]] | None]]:
        """The prompt scores taken so far, as lists (first the request's own number of alternatives)."""
        with self._scores_lock:
            _extend(self._prompt_logprobs, self._prompt_top_logprobs, self._prompt_parts, self.params.prompt_logprobs)
            return self._prompt_logprobs, self._prompt_top_logprobs

    def abort(self) -> None:
        """End the request early (a client gone), from any thread: the decode loop lets it go before its
        next step (``finish_reason`` ``"abort"``), keeping the tokens it has. Nothing if it has finished."""
        self.aborted = True
        ABORTS[0] += 1  # after the flag: a loop that sees the count change finds the flag set

    def end_aborted(self) -> None:
        """The loop's side of :meth:`abort`: mark it finished."""
        if not self.finished:
            self.finished, self.finish_reason = True, "abort"
            if self.on_finish is not None:
                self.on_finish(self)

    def start_prompt_scores(self) -> None:
        """Prompt scores to come: the first prompt token has none."""
        with self._scores_lock:
            self._prompt_logprobs, self._prompt_top_logprobs, self._prompt_parts = [None], [None], []
        self.prompt_pending = []

    def take_prompt_scores(self) -> None:
        """Take the prompt scores of its prefill's forwards, in order (waiting for their copies), as host
        arrays: :attr:`prompt_logprobs` and :attr:`prompt_top_logprobs` make them lists when read."""
        parts = [(holder.get(row, count), count) for holder, row, count in self.prompt_pending]
        with self._scores_lock:
            self._prompt_parts.extend(parts)
        self.prompt_pending = []

    def settle(self) -> bool:
        """Take the first token of a chunked prefill, and its prompt scores (waiting for their copies to
        the host, which a step launched after them has passed); whether one was pending."""
        if self.first_pending is None:
            return False
        self.take_prompt_scores()
        first, row = self.first_pending
        self.first_pending = None
        token, scores = first.get(row)
        self.append([token], scores)
        return True

    def append(self, tokens: Sequence[int], scores: tuple | None = None) -> None:
        """Add emitted tokens up to the first EOS id (kept), the length limit or ``stop``; sets ``finished``.
        ``scores``: ``(logprobs, top_ids, top_logprobs)`` of ``tokens``, host lists or arrays (``[n]``,
        ``[n, k]``, ``[n, k]``) that nothing writes again, kept for those taken (as they are: made lists when
        :attr:`logprobs` or :attr:`top_logprobs` is read)."""
        start = len(self.output)
        if self.stop is None and start + len(tokens) < self.max_new_tokens and not any(e in tokens for e in self.eos):
            self.output.extend(tokens)  # the common case: no EOS among them, room after them
        else:
            self._take_until_finished(tokens)
        if scores is not None:
            with self._scores_lock:
                self._step_scores.append((scores, len(self.output) - start))
        if self.on_tokens is not None and len(self.output) > start:
            self.on_tokens(self.output[start:])
        if self.finished and self.on_finish is not None:
            self.on_finish(self)

    def _take_until_finished(self, tokens: Sequence[int]) -> None:
        for tok in tokens:
            self.output.append(tok)
            if tok in self.eos:
                self.finished, self.finish_reason = True, "stop" if tok in self.params.stop_token_ids else "eos"
            elif len(self.output) >= self.max_new_tokens:
                self.finished, self.finish_reason = True, "length"
            elif self.stop is not None and self.stop(self.output):
                self.finished, self.finish_reason = True, "stop"
            if self.finished:
                return


@dataclass
class GenerationStats:
    steps: int = 0
    request_steps: int = 0  # sum over steps of the requests that used the step's output
    emitted: int = 0  # tokens produced by steps (accepted drafts + bonus), before truncation
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0  # the loop's time, prefills and idle waits not counted
    idle_seconds: float = 0.0  # waiting for a request to arrive, nothing running
    discarded_steps: int = 0  # request-steps thrown away: finished already (overlapped loop), or by their first token
    batch_changes: int = 0  # steps whose requests differed from the step before (a new slot list)
    draft_len_steps: Counter = field(default_factory=Counter)  # K -> steps that drafted K tokens
    penalised_steps: int = 0  # steps whose batch held a request that sets a penalty (the penalised keys)
    stalled: int = 0  # request-steps sat out waiting for KV pages

    @property
    def mean_accept_len(self) -> float:
        """Tokens per request per step, the bonus included (K + 1 when every draft is accepted)."""
        return self.emitted / self.request_steps if self.request_steps else 0.0

    def as_dict(self) -> dict:
        return {
            "steps": self.steps,
            "request_steps": self.request_steps,
            "emitted": self.emitted,
            "mean_accept_len": round(self.mean_accept_len, 4),
            "prefill_seconds": round(self.prefill_seconds, 4),
            "decode_seconds": round(self.decode_seconds, 4),
            "idle_seconds": round(self.idle_seconds, 4),
            "discarded_steps": self.discarded_steps,
            "batch_changes": self.batch_changes,
            "draft_len_steps": {str(k): n for k, n in sorted(self.draft_len_steps.items())},
            "penalised_steps": self.penalised_steps,
            "stalled": self.stalled,
        }


@dataclass(frozen=True)
class RequestRules:
    """What every request of a decoder must satisfy, and what it inherits (EOS ids, the run's seed)."""

    vocab_size: int
    max_seq_len: int
    num_draft_tokens: int
    seed: int
    eos: tuple[int, ...]
    kv: KVCache | None = None  # refuses what could never fit its pool
    penalties: bool = False  # whether the decoder applies penalties
    logprobs: int | None = None  # the alternatives a token the decoder computes (None: no log-probabilities)
    prompt_logprobs: int | None = None  # the same for the prompt's tokens

    def make(
        self, rid: int, prompt: Sequence[int] | torch.Tensor, max_new_tokens: int, params: SamplingParams
    ) -> Request:
        """A checked :class:`Request` (``ValueError``/``TypeError`` naming what to change)."""
        prompt = token_ids(prompt)
        if not isinstance(params, SamplingParams):
            raise TypeError(f"sampling must be a SamplingParams (or one per prompt), got {type(params).__name__}")
        if not isinstance(max_new_tokens, numbers.Integral) or isinstance(max_new_tokens, bool):
            raise TypeError(f"max_new_tokens must be an int, got {max_new_tokens!r}")
        if not prompt:
            raise ValueError("empty prompt: give at least one token")
        if params.needs_penalty_state is not None and not self.penalties:
            name = params.needs_penalty_state
            raise ValueError(
                f"this request sets {name}={getattr(params, name)!r}, which the decoder applies with its penalties, "
                "but it was built without them; build it with penalties=True"
            )
        check_token_ids(params, self.vocab_size)
        stops = params.stops(self.eos)
        if params.min_tokens and len(stops) > MAX_BANNED:
            held = (
                "its stop_token_ids"
                if params.ignore_eos
                else f"the decoder's {len(self.eos)} EOS ids and its stop_token_ids"
            )
            raise ValueError(
                f"min_tokens holds back at most {MAX_BANNED} EOS and stop token ids; this request has {len(stops)} "
                f"({held})"
            )
        check_some_token_left(params, stops)
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if min(prompt) < 0 or max(prompt) >= self.vocab_size:
            raise ValueError(f"prompt token ids must be in [0, {self.vocab_size}); got {min(prompt)}..{max(prompt)}")
        need = len(prompt) + max_new_tokens + 2 * (self.num_draft_tokens + 1)
        if need > self.max_seq_len:
            raise ValueError(
                f"prompt ({len(prompt)}) + max_new_tokens ({max_new_tokens}) + 2*(K+1) = {need} exceeds max_seq_len "
                f"{self.max_seq_len}; lower max_new_tokens or build the models with a longer cache"
            )
        if self.kv is not None:
            self.kv.check_fits(need)
        inherited = {}  # what the request takes from the decoder
        for name in ("logprobs", "prompt_logprobs"):
            if getattr(params, name) is None:
                inherited[name] = getattr(self, name)
            else:
                self._check_top_n(name, getattr(params, name))
        if params.seed is None:
            inherited["seed"] = (self.seed * 1_000_003 + rid) % (INT64_MAX + 1)
        if any(getattr(params, name) != value for name, value in inherited.items()):
            params = replace(params, **inherited)
        return Request(rid, prompt, int(max_new_tokens), params, stops)

    def _check_top_n(self, name: str, n: int) -> None:
        """A request's ``logprobs`` / ``prompt_logprobs`` against what the decoder computes."""
        most = getattr(self, name)
        if most is not None and n <= most:
            return
        has = f"computes {most} alternatives a token" if most is not None else "computes none"
        raise ValueError(f"this request sets {name}={n}, but the decoder {has}; build it with {name}={n} or more")


def token_ids(prompt: Sequence[int] | torch.Tensor) -> list[int]:
    """A prompt as a list of ints: a sequence of integers or a 1-D integer tensor. Floats (which
    ``int()`` would truncate), bools and strings are refused."""
    if isinstance(prompt, torch.Tensor):
        dt = prompt.dtype
        if prompt.dim() != 1 or dt.is_floating_point or dt.is_complex or dt == torch.bool:
            raise ValueError(f"a prompt tensor must be 1-D of an integer dtype, got {dt} {tuple(prompt.shape)}")
        return prompt.tolist()
    if isinstance(prompt, (str, bytes)) or not isinstance(prompt, Sequence):
        raise TypeError(f"a prompt must be a sequence of token ids (ints), got {type(prompt).__name__}")
    for t in prompt:
        if not isinstance(t, numbers.Integral) or isinstance(t, bool):
            raise TypeError(f"prompt token ids must be integers, got {t!r} ({type(t).__name__}); tokenize first")
    return [int(t) for t in prompt]


def normalize_eos(value: int | Sequence[int] | None, vocab_size: int) -> tuple[int, ...]:
    """``eos_token_id`` (``None``, an id, or a list of ids) as a tuple of ids in ``[0, vocab_size)``."""
    if value is None:
        return ()
    ids = list(value) if isinstance(value, (list, tuple, set, frozenset)) else [value]
    for i in ids:
        if not isinstance(i, numbers.Integral) or isinstance(i, bool):
            raise TypeError(f"eos_token_id must be an int or a list of ints, got {i!r} ({type(i).__name__})")
        if not 0 <= i < vocab_size:
            raise ValueError(f"eos_token_id {i} is outside the vocabulary [0, {vocab_size}); it would never match")
    return tuple(dict.fromkeys(int(i) for i in ids))


def _extend(logprobs: list, top_logprobs: list, parts: list[tuple], n: int | None) -> None:
    """Turn ``parts``, ``((logprobs, top_ids, top_logprobs), rows)`` each (host arrays or lists), into
    ``logprobs`` and ``top_logprobs``' lists (the first ``rows`` rows, the first ``n`` alternatives of each,
    ``None``: all), and empty it."""
    for (values, top_ids, top_values), rows in parts:
        logprobs.extend(_as_list(values[:rows]))
        pairs = zip(_columns(top_ids, rows, n), _columns(top_values, rows, n))
        top_logprobs.extend(list(zip(i, v)) for i, v in pairs)
    parts.clear()


def _as_list(x) -> list:
    """A host array (numpy) or a list as a list of Python numbers."""
    return x.tolist() if hasattr(x, "tolist") else list(x)


def _columns(x, rows: int, n: int | None) -> list[list]:
    """The first ``n`` columns (``None``: all) of the first ``rows`` rows of a host array or nested list."""
    return x[:rows, :n].tolist() if hasattr(x, "tolist") else [r[:n] for r in x[:rows]]
