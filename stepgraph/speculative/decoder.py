"""Speculative generation over the chain step: the decoder a user holds.

:class:`SpecDecoder` wires the parts together: :class:`~stepgraph.speculative.step.ChainStep` (the step
graph), :class:`~stepgraph.speculative.slots.SlotAllocator` (relay slots, cache rows),
:class:`~stepgraph.speculative.prefill.Prefill` and :class:`~stepgraph.speculative.scheduler.Scheduler`
(the synchronous and overlapped loops).
"""

from __future__ import annotations

import functools
import math
import numbers
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from stepgraph.config import RunnerConfig
from stepgraph.kv import KVCache, RowKV
from stepgraph.runner import StepGraphRunner, WarmupReport
from stepgraph.sampling import Sampling, SamplingParams, check_int64
from stepgraph.speculative.chunk_forward import ChunkForward
from stepgraph.speculative.draft_policy import AutoDraftLength, DraftPolicy, draft_policy
from stepgraph.speculative.penalties import PenaltyState
from stepgraph.speculative.prefill import Prefill
from stepgraph.speculative.request_queue import RequestQueue
from stepgraph.speculative.requests import GREEDY, GenerationStats, Request, RequestRules, normalize_eos
from stepgraph.speculative.scheduler import Scheduler
from stepgraph.speculative.scores import check_top_logprobs
from stepgraph.speculative.slots import SlotAllocator
from stepgraph.speculative.step import ChainStep, Draft, Target
from stepgraph.speculative.tp import TensorParallel

__all__ = ["GenerationStats", "Request", "SpecDecoder"]


def _one_call_at_a_time(method):
    """Run ``method`` under the decoder's lock: calls from several threads are served one after another."""

    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


class SpecDecoder:
    """Speculative decoding with the chain step graph.

    Parameters
    ----------
    target, draft:
        Graph-safe callables over static KV caches, with ``max_requests`` real cache rows plus the
        scratch row ``scratch_cache_row``.
    num_draft_tokens:
        The draft tokens per step (:mod:`stepgraph.speculative.draft_policy`): an int K (0: plain
        decoding); several ints (each gets its keys; the first is taken); a schedule ``{batch size: K}``;
        or ``"auto"`` (an :class:`~stepgraph.speculative.draft_policy.AutoDraftLength`, or one with draft
        lengths of its own): each step takes the K that maximises expected tokens per second, from every
        key's step time (measured by :meth:`warmup`) and each request's acceptance so far.
    max_requests:
        Cache rows (requests alive at once, draining ones included).
    max_seq_len:
        Cache length; a request needs ``len(prompt) + max_new_tokens + 2 * (K + 1) <= max_seq_len``.
    vocab_size, draft_hidden_size, hidden_dtype, scratch_cache_row:
        Model facts (``SpecDecoder.for_example`` reads them off the example models).
    max_batch:
        Largest batch per step, in ``1..max_requests`` (default: ``min(max_requests, 64)``).
    eos_token_id:
        An id, or a list of ids (as Hugging Face generation configs carry), that stops a request when
        emitted (it is kept in the output); each in ``[0, vocab_size)``.
    seed:
        Seeds requests without their own seed: request ``i`` of the decoder draws from the stream of seed
        ``seed * 1000003 + i``. A request's tokens depend only on its prompt, its settings and its seed, on
        every path (a GPU, Triton's CPU interpreter, the torch references), not on its batch mates.
    tp:
        Tensor parallelism: rank 0's verify result is broadcast once per step (:mod:`stepgraph.speculative.tp`).
    splice_stages:
        Build step graphs from spliced per-stage graphs (:mod:`stepgraph.splice`).
    compile:
        ``True``: the step's target and draft forwards go through ``torch.compile`` (inductor's kernels, no
        CUDA graphs of their own), compiled during warm-up and captured into the step graph; a backend name
        (``"aot_eager"``) picks another backend. Prefill runs the forwards as written. Compiled kernels
        round differently: greedy output can differ from the uncompiled decoder's (``STEPGRAPH_COMPILE=0``
        turns compiling off, so ``stepgraph bisect`` can name it). See :mod:`stepgraph.compile`.
    logprobs:
        ``None``, or the number of alternatives per token (0..20): every emitted token's log-probability
        under the target's raw distribution, computed in the step graph, with that many most probable
        alternatives; each :class:`Request` from :meth:`serve` holds them (``logprobs``, ``top_logprobs``).
        See :mod:`stepgraph.speculative.scores`.
    logprobs_mode:
        ``"raw"`` (the default: the target's raw distribution, as the OpenAI API defines it) or
        ``"processed"``: the distribution each token was drawn from, after penalties, temperature and the
        request's filters (a sort of every verify row of a sampled step, on top).
    prompt_logprobs:
        ``None``, or the number of alternatives per position (0..20): each prompt token after the first is
        scored under the target's raw logits of the positions before it (vLLM's ``prompt_logprobs``; the
        OpenAI completions API's ``echo`` with ``logprobs``), in the prefill's forwards (the chunk forward's
        graph too); each :class:`Request` holds them (``prompt_logprobs``, ``prompt_top_logprobs``). With a
        chunked prefill they reach the host with the first token, after the request's first step.
    kv_cache:
        The models' KV cache (:mod:`stepgraph.kv`), which hands out cache rows (and pages) to requests:
        a :class:`~stepgraph.kv.PagedKV` the models share, or by default a :class:`~stepgraph.kv.RowKV` of
        ``max_requests`` rows. ``for_example`` passes the example models' own.
    prefill_chunk:
        Positions of prompt prefilled between two steps (``None``: each arriving prompt whole and eagerly,
        before the next step). Prompts then go through in chunks while the requests already decoding keep
        stepping: one forward of this many positions between two steps, shared by up to 8 requests'
        chunks (``n`` of ``prefill_chunk // n`` positions each, ``n`` a power of two up to ``max_batch``),
        captured as one graph per ``n``
        (:mod:`stepgraph.speculative.chunk_forward`; ``STEPGRAPH_PREFILL_GRAPH=0`` runs it eagerly). A
        request joins the batch after its last chunk. The forwards differ from a whole prompt's only in
        how they split and batch the work (greedy output can differ in the last bits, as with another
        batch size in bf16).
    penalties:
        Serve requests with a ``repetition_penalty``, ``presence_penalty``, ``frequency_penalty``,
        ``min_tokens``, ``no_repeat_ngram_size``, ``logit_bias``, ``bad_words_ids`` or ``allowed_token_ids``
        (:mod:`stepgraph.speculative.penalties`): each request's tokens, output counts, logit biases and bad
        words are kept on the device (about ``(max_requests + 2) * (2 * vocab_size + vocab_size / 32 +
        max_seq_len + 4096)`` words of 4 bytes), and a step whose batch holds such a request penalises the
        target's logits before acceptance (a float32 copy of the logits and one kernel over each request's
        tokens) in keys of its own (``/penalised``; the warm-up captures both kinds); a batch without one
        runs keys that skip it. Off, such a request is refused.

    Notes
    -----
    Threads: a decoder serves one call at a time. :meth:`generate`, :meth:`warmup`, :meth:`admit`,
    :meth:`finish`, :meth:`release` and :meth:`device_step_ms` take the decoder's lock, so a second
    thread's call waits until the first returns, and each gets the tokens it would get alone. For work
    in parallel, give each thread a decoder of its own.
    """

    def __init__(
        self,
        target: Target,
        draft: Draft,
        *,
        num_draft_tokens: int | Sequence[int] | dict[int, int] | str | DraftPolicy = 3,
        max_requests: int,
        max_seq_len: int,
        vocab_size: int,
        draft_hidden_size: int,
        hidden_dtype: torch.dtype,
        scratch_cache_row: int,
        device: torch.device | str = "cpu",
        max_batch: int | None = None,
        eos_token_id: int | Sequence[int] | None = None,
        config: RunnerConfig | None = None,
        seed: int = 0,
        tp: TensorParallel | None = None,
        splice_stages: bool = False,
        compile: bool | str = False,
        logprobs: int | None = None,
        kv_cache: KVCache | None = None,
        prefill_chunk: int | None = None,
        penalties: bool = False,
        target_hidden_size: int | None = None,
        logprobs_mode: str = "raw",
        prompt_logprobs: int | None = None,
    ) -> None:
        self.target, self.draft = target, draft
        if not isinstance(penalties, bool):
            raise TypeError(f"penalties must be True or False, got {penalties!r}")
        if prefill_chunk is not None and (
            not isinstance(prefill_chunk, numbers.Integral) or isinstance(prefill_chunk, bool) or prefill_chunk < 1
        ):
            raise ValueError(f"prefill_chunk must be an int >= 1 (positions per chunk) or None, got {prefill_chunk!r}")
        self.prompt_logprobs = check_top_logprobs(prompt_logprobs, "prompt_logprobs")
        self.draft_lens, policy = draft_policy(num_draft_tokens)
        self.K = self.draft_lens[0]
        self.device = torch.device(device)
        self.max_requests, self.max_seq_len = max_requests, max_seq_len
        if max_batch is None:
            max_batch = min(max_requests, 64)
        if (
            not isinstance(max_batch, numbers.Integral)
            or isinstance(max_batch, bool)
            or not 1 <= max_batch <= max_requests
        ):
            raise ValueError(
                f"max_batch must be in 1..max_requests ({max_requests}), got {max_batch}; "
                "leave it unset for min(max_requests, 64)"
            )
        self.max_batch = max_batch
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id
        self.seed = check_int64("seed", seed)
        self.kv = RowKV(max_requests, max_seq_len, self.device) if kv_cache is None else kv_cache
        if self.kv.num_rows < max_requests or self.kv.scratch_row != scratch_cache_row:
            raise ValueError(
                f"kv_cache has {self.kv.num_rows} rows and scratch row {self.kv.scratch_row}; the decoder needs "
                f">= max_requests ({max_requests}) rows and scratch_cache_row {scratch_cache_row}"
            )
        state = PenaltyState(max_requests + 2, vocab_size, max_seq_len, self.device) if penalties else None
        self.step = ChainStep(
            target,
            draft,
            num_draft_tokens=self.draft_lens,
            num_slots=max_requests + 1,
            max_batch=self.max_batch,
            vocab_size=vocab_size,
            draft_hidden_size=draft_hidden_size,
            hidden_dtype=hidden_dtype,
            scratch_cache_row=scratch_cache_row,
            device=self.device,
            config=config,
            tp=tp,
            splice_stages=splice_stages,
            compile=compile,
            logprobs=logprobs,
            kv_cache=self.kv,
            penalties=state,
            logprobs_mode=logprobs_mode,
        )
        self.logprobs = self.step.logprobs
        self.toggles = self.step.toggles
        self.slots = SlotAllocator(max_requests, self.step.relay, self.kv, margin=2 * (self.step.max_draft_len + 1))
        chunks = None
        if prefill_chunk is not None:
            chunks = ChunkForward(
                target,
                draft,
                chunk=prefill_chunk,
                max_chunks=self.max_batch,
                hidden_size=draft_hidden_size if target_hidden_size is None else target_hidden_size,
                hidden_dtype=hidden_dtype,
                scratch_row=scratch_cache_row,
                max_seq_len=max_seq_len,
                device=self.device,
                kernels=self.toggles.two_launch_sampling,
                dependent=self.toggles.dependent_launch,
                config=self.step.config,
                agree=tp.agree if tp is not None else None,
                penalties=state,
                prompt_logprobs=self.prompt_logprobs,
                logprob_kernels=self.toggles.fused_logprobs,
            )
        self.chunk_forward = chunks
        prefill = Prefill(
            target,
            draft,
            self.step.relay,
            self.device,
            kernels=self.toggles.two_launch_sampling,
            dependent=self.toggles.dependent_launch,
            logprobs=logprobs,
            logprob_kernels=self.toggles.fused_logprobs,
            chunks=chunks,
            penalties=state,
            logprobs_mode=self.step.logprobs_mode,
            prompt_logprobs=self.prompt_logprobs,
        )
        self._lock = threading.RLock()  # one call at a time (class docstring, "Threads")
        self.scheduler = Scheduler(
            self.step, self.slots, prefill, max_batch=max_batch, device=self.device, policy=policy
        )
        self._step_ms: dict[tuple[int, int], float] = {}  # (bucket, K) -> measured ms: what "auto" reads
        if isinstance(policy, AutoDraftLength) and policy.step_ms is None:
            policy.step_ms = self.step_ms
        self._next_id = 0
        self._ids_lock = threading.Lock()

    @classmethod
    def for_example(cls, target: Any, draft: Draft, **kwargs) -> SpecDecoder:
        """A decoder for the example models (``stepgraph.examples.model``: ``target`` an ``ExampleTarget``,
        whose config gives the cache and vocabulary sizes), over their KV cache (``target.kv``): decoders
        built over the same models share its rows and pages."""
        cfg = target.cfg
        return cls(
            target,
            draft,
            max_requests=cfg.max_requests,
            max_seq_len=cfg.max_seq_len,
            vocab_size=cfg.vocab_size,
            draft_hidden_size=draft.hidden_size,
            hidden_dtype=target.dtype,
            target_hidden_size=target.hidden_size,
            scratch_cache_row=cfg.scratch_row,
            device=target.device,
            **{"kv_cache": target.kv, **kwargs},
        )

    # ---- state ---------------------------------------------------------------------------------
    @property
    def eos_token_id(self) -> tuple[int, ...]:
        """The ids that end a request (kept in its output); empty when none is set."""
        return self._eos

    @eos_token_id.setter
    def eos_token_id(self, value: int | Sequence[int] | None) -> None:
        self._eos = normalize_eos(value, self.vocab_size)

    @property
    def policy(self) -> DraftPolicy:
        """What picks each step's draft length (settable, among the draft lengths the decoder has keys for)."""
        return self.scheduler.policy

    @policy.setter
    def policy(self, policy: DraftPolicy) -> None:
        if isinstance(policy, AutoDraftLength) and policy.step_ms is None:
            policy.step_ms = self.step_ms
        self.scheduler.policy = policy

    @property
    def runner(self) -> StepGraphRunner:
        return self.step.runner

    @property
    def in_use(self) -> tuple[int, int]:
        """``(relay slots, cache rows)`` held by requests: ``(0, 0)`` between :meth:`generate` calls,
        also after one that raised."""
        return self.slots.in_use

    @property
    def stats(self) -> GenerationStats:
        """Counts over every :meth:`generate` since construction (assign a new one to start afresh)."""
        return self.scheduler.stats

    @stats.setter
    def stats(self, value: GenerationStats) -> None:
        self.scheduler.stats = value

    @property
    def record_step_events(self) -> bool:
        """Record a (start, end) CUDA event pair around every step in :attr:`step_events` (benchmarks)."""
        return self.scheduler.record_step_events

    @record_step_events.setter
    def record_step_events(self, on: bool) -> None:
        self.scheduler.record_step_events = on

    @property
    def step_events(self) -> list[tuple[torch.cuda.Event, torch.cuda.Event]]:
        return self.scheduler.step_events

    # ---- generation ------------------------------------------------------------------------------
    @_one_call_at_a_time
    def warmup(
        self, max_running_requests: int | None = None, sampling: Sampling | str | Sequence = Sampling.GREEDY
    ) -> WarmupReport:
        """Capture the keys for batch sizes 1..N (``N`` defaults to ``max_batch``), for each sampling class
        given and each draft length, before serving (see :meth:`StepGraphRunner.warmup`), and with
        ``prefill_chunk`` the chunk forward's. With ``num_draft_tokens="auto"`` also measures the step
        time of every key a batch can pad to. Returns the step's report."""
        if max_running_requests is not None and (
            not isinstance(max_running_requests, numbers.Integral) or max_running_requests < 1
        ):
            raise ValueError(
                f"max_running_requests must be an int >= 1 (or None for max_batch), got {max_running_requests!r}"
            )
        report = self.step.warmup(max_running_requests or self.max_batch, sampling)
        if self.chunk_forward is not None:  # the chunk forward's graphs, one per number of chunks
            self.chunk_forward.runner.warmup(self.chunk_forward.sizes[-1], sampling)
        if isinstance(self.policy, AutoDraftLength):  # every key a batch can pad to, timed now, not while serving
            for bucket in self.runner.buckets:
                if bucket <= self.max_batch:
                    for k in self.policy.draft_lens:
                        self.step_ms(bucket, k)
        return report

    def step_ms(self, bucket: int, draft_len: int) -> float:
        """The measured time of a greedy step of the key ``(bucket, K)``, in ms (measured on first asking,
        on pad-filled buffers: a graph's device time, or an eager step's wall time). Under tensor
        parallelism rank 0's figure, so every rank takes the same decisions."""
        key = (bucket, draft_len)
        if key not in self._step_ms:
            ms = self.runner.time_key(self.runner.buckets.key((bucket, "greedy", draft_len)))
            if self.step.tp is not None:
                ms = self.step.tp.share([ms])[0]
            self._step_ms[key] = ms
        return self._step_ms[key]

    def step_times(self) -> dict[str, float]:
        """Every step time measured so far, ``{"bs=B/k=K": ms}``."""
        return {f"bs={b}/k={k}": round(ms, 4) for (b, k), ms in sorted(self._step_ms.items())}

    @_one_call_at_a_time
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int | Sequence[int] = 32,
        sampling: SamplingParams | Sequence[SamplingParams] = GREEDY,
        overlap: bool = False,
        on_step: Callable[[int], None] | None = None,
        arrivals: Sequence[float] | None = None,
        on_tokens: Callable[[int, list[int]], None] | None = None,
    ) -> list[list[int]]:
        """Generate for every prompt; returns the new tokens of each (EOS included when hit).

        ``prompts``: token-id lists (or 1-D integer tensors). ``on_step(batch_size)`` is called once per
        step on the host (scheduling work, for benchmarks). ``arrivals``: seconds after the call at which
        each request may join (a serving trace; default: all at once); requests join and leave the batch
        as they arrive and finish. ``on_tokens(i, tokens)``: streaming, called with prompt ``i``'s new
        tokens as they are accepted (the prefill's first token, then each step's, in both loops). Whatever
        raises inside reaches the caller after every slot and cache row is given back.
        """
        requests = self.make_requests(prompts, max_new_tokens, sampling)
        if on_tokens is not None:
            for i, r in enumerate(requests):
                r.on_tokens = functools.partial(on_tokens, i)
        return [r.output for r in self.serve(requests, overlap=overlap, on_step=on_step, arrivals=arrivals)]

    @_one_call_at_a_time
    def serve(
        self,
        requests: Sequence[Request] | RequestQueue,
        *,
        overlap: bool = False,
        on_step: Callable[[int], None] | None = None,
        arrivals: Sequence[float] | None = None,
    ) -> Sequence[Request]:
        """Run requests from :meth:`make_requests` (their ``on_tokens`` and ``stop`` set as wished) to the
        end; returns them, each with its ``output`` and ``finish_reason``. ``overlap``, ``on_step``,
        ``arrivals``: as :meth:`generate`.

        ``requests`` may be a :class:`~stepgraph.speculative.request_queue.RequestQueue` instead: the
        loop serves what other threads put in it, each request joining the batch when it is taken (between
        two steps), until the queue is closed and they have all finished; returns them in the order taken.
        A request's :meth:`Request.abort` (from any thread, an ``on_tokens`` callback included) ends it
        before its next step, with ``finish_reason`` ``"abort"``.

        Raises
        ------
        ValueError
            For a queue under tensor parallelism (every rank must take the same requests at the same step:
            give each rank the same list, with ``arrivals``).
        """
        source = None
        if isinstance(requests, RequestQueue):
            if self.step.tp is not None:
                raise ValueError(
                    "serve(RequestQueue) cannot run under tensor parallelism: the ranks would take requests at "
                    "different steps; give every rank the same list of requests (with arrivals)"
                )
            if arrivals is not None:
                raise ValueError("arrivals are for a list of requests; a queue's requests arrive when put")
            source, requests = requests, []
        if arrivals is not None:
            arrivals = list(arrivals)
            bad = [a for a in arrivals if not (isinstance(a, numbers.Real) and math.isfinite(a) and a >= 0.0)]
            if len(arrivals) != len(requests) or bad:
                raise ValueError("arrivals: give one finite time >= 0 (seconds) per prompt")
            for r, a in zip(requests, arrivals):
                r.arrival = float(a)
        if not requests and source is None:
            return requests
        stats = self.scheduler.stats
        prefill0, idle0, t0 = stats.prefill_seconds, stats.idle_seconds, time.perf_counter()
        served = self.scheduler.run(list(requests), overlap=overlap, on_step=on_step, source=source)
        elapsed = time.perf_counter() - t0
        stats.decode_seconds += elapsed - (stats.prefill_seconds - prefill0) - (stats.idle_seconds - idle0)
        return requests if source is None else served

    def make_requests(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int | Sequence[int] = 32,
        sampling: SamplingParams | Sequence[SamplingParams] = GREEDY,
    ) -> list[Request]:
        """Checked :class:`Request` objects, one per prompt (``max_new_tokens`` and ``sampling``: one for
        all or one per prompt). They hold no slot until admitted. Safe from any thread, while
        :meth:`serve` runs too (for its :class:`~stepgraph.speculative.request_queue.RequestQueue`)."""
        n = len(prompts)
        one = isinstance(max_new_tokens, numbers.Integral) and not isinstance(max_new_tokens, bool)
        if not one and not isinstance(max_new_tokens, (list, tuple)):
            raise TypeError(f"max_new_tokens must be an int or one int per prompt, got {max_new_tokens!r}")
        if not isinstance(sampling, (SamplingParams, list, tuple)):
            raise TypeError(f"sampling must be a SamplingParams or one per prompt, got {sampling!r}")
        limits = [max_new_tokens] * n if one else list(max_new_tokens)
        params = [sampling] * n if isinstance(sampling, SamplingParams) else list(sampling)
        if len(limits) != n or len(params) != n:
            raise ValueError("give one max_new_tokens and one SamplingParams per prompt (or one for all)")
        rules = RequestRules(
            self.vocab_size, self.max_seq_len, max(self.draft_lens), self.seed, self._eos, self.kv,
            penalties=self.step.penalties is not None, logprobs=self.logprobs, prompt_logprobs=self.prompt_logprobs,
        )  # fmt: skip
        with self._ids_lock:  # each request's id once, whichever threads make them; none taken by a refusal
            requests = [
                rules.make(self._next_id + i, p, m, sp) for i, (p, m, sp) in enumerate(zip(prompts, limits, params))
            ]
            self._next_id += n
        return requests

    # ---- public hooks for benchmarks and custom loops ---------------------------------------------
    @_one_call_at_a_time
    def admit(self, requests: Sequence[Request]) -> torch.Tensor:
        """Prefill ``requests`` into slots and keep them resident (a lone request in the view slot); returns
        their slot list ``[B]`` for :meth:`ChainStep.run`. Give them back with :meth:`finish`.

        Raises
        ------
        ValueError
            When fewer relay slots or cache rows are free than ``requests`` need, before any is taken; a
            prefill that raises gives back what this call took.
        """
        free = self.slots.free()
        if len(requests) > free:
            raise ValueError(
                f"admit: {len(requests)} requests, but only {free} of the decoder's {self.max_requests} slots are "
                "free; finish() some first, or build the decoder with a larger max_requests"
            )
        try:
            for r in requests:
                self.scheduler.admit(r)
            if len(requests) == 1 and self.step.relay.single_views and requests[0].slot != 0:
                self.slots.move_to_slot0(requests[0])
        except BaseException:
            self.slots.give_back_all(requests, self.device)
            raise
        return torch.tensor([r.slot for r in requests], dtype=torch.int64)

    @_one_call_at_a_time
    def finish(self, requests: Sequence[Request]) -> None:
        """Give back the slots and cache rows that ``requests`` hold."""
        self.slots.give_back_all(requests, self.device)

    def read_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """A step's ``tokens [B, K+1]`` on the host (one copy into pinned memory, then a wait)."""
        return self.scheduler.read_tokens(tokens)

    # ---- the rest ------------------------------------------------------------------------------------
    def info(self) -> dict:
        times = {"step_ms": self.step_times()} if self._step_ms else {}
        chunks = {"prefill_chunks": self.chunk_forward.runner.info()} if self.chunk_forward is not None else {}
        return {
            **self.step.info(),
            **chunks,
            "kv": self.kv.info(),
            "generation": self.stats.as_dict(),
            "draft_policy": type(self.policy).__name__,
            "prompt_logprobs": self.prompt_logprobs,
            **times,
        }

    @_one_call_at_a_time
    def release(self) -> None:
        """Release every graph of the step and of the chunk forward (they run eagerly until they capture
        again). Under tensor parallelism, call it before ``dist.destroy_process_group()``."""
        self.step.release()
        if self.chunk_forward is not None:
            self.chunk_forward.runner.release()

    @_one_call_at_a_time
    def device_step_ms(self, batch_size: int, steps: int = 50) -> float:
        """Device time of one step at ``batch_size``: back-to-back replays of its captured graph with no
        host sync in between (milliseconds; NaN when the key has no graph). The relay state is restored
        afterwards. For benchmarks."""
        key = self.runner.key_for(batch_size)
        captured = self.runner.stats(key).captured if key is not None else None
        if captured is None:
            return float("nan")
        relay = self.step.relay
        state = {**relay.fields, **(relay.penalties.tensors() if relay.penalties is not None else {})}
        saved = {n: f.clone() for n, f in state.items()}
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            captured.replay()
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) / steps * 1e3
        for n, f in state.items():
            f.copy_(saved[n])
        return ms
