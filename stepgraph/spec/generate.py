"""Speculative generation: prefill (eager), then chain steps until each request is done.

Requests of different lengths share a batch; finished requests leave and waiting ones join, so the key
changes as the batch shrinks and grows. Two loops:

* synchronous (``overlap=False``, the reference): launch step N, read its tokens, decide step N+1;
* overlapped (``overlap=True``): launch step N+1 *before* reading step N's tokens. Step N+1 reads its
  inputs from the relay slots step N wrote, on the device; step N's tokens come back through a
  non-blocking copy into pinned memory and an event. EOS and length limits are therefore seen one step
  late: a request that finished at step N also runs step N+1, whose output is discarded. A slot (and
  cache row) is reused only after every step that reads it has completed. On the CPU the same loop runs
  (its copies and events are synchronous), which is how it is tested without a GPU.
"""

from __future__ import annotations

import contextlib
import numbers
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import torch

from stepgraph.config import RunnerConfig
from stepgraph.kernels.chain_sampling import chain_verify_sampling
from stepgraph.keys import INT64_MAX, Sampling, SamplingParams, check_int64
from stepgraph.spec.step import ChainStep, Draft, Target
from stepgraph.spec.tp import TensorParallel

GREEDY = SamplingParams()


@dataclass
class Request:
    """One generation request and its progress."""

    id: int
    prompt: list[int]
    max_new_tokens: int
    params: SamplingParams
    output: list[int] = field(default_factory=list)
    slot: int = -1
    cache_row: int = -1
    finished: bool = False
    finish_reason: str | None = None


@dataclass
class GenerationStats:
    steps: int = 0
    request_steps: int = 0  # sum over steps of the requests that used the step's output
    emitted: int = 0  # tokens produced by steps (accepted drafts + bonus), before truncation
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    discarded_steps: int = 0  # overlapped loop: extra steps of requests that had already finished

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
            "discarded_steps": self.discarded_steps,
        }


class SpecDecoder:
    """Speculative decoding with the chain step graph.

    Parameters
    ----------
    target, draft:
        Graph-safe callables over static KV caches, with ``max_requests`` real cache rows plus the
        scratch row ``scratch_cache_row``.
    num_draft_tokens:
        K.
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
        Seeds requests without their own seed, and torch's generator for the torch sampling paths.
    tp:
        Tensor parallelism: rank 0's verify result is broadcast once per step (:mod:`stepgraph.spec.tp`).
    splice_stages:
        Build step graphs from spliced per-stage graphs (:mod:`stepgraph.splice`).
    """

    def __init__(
        self,
        target: Target,
        draft: Draft,
        *,
        num_draft_tokens: int = 3,
        max_requests: int,
        max_seq_len: int,
        vocab_size: int,
        draft_hidden_size: int,
        hidden_dtype: torch.dtype,
        scratch_cache_row: int,
        device: torch.device | str = "cpu",
        max_batch: int | None = None,
        eos_token_id: int | None = None,
        config: RunnerConfig | None = None,
        seed: int = 0,
        tp: TensorParallel | None = None,
        splice_stages: bool = False,
    ) -> None:
        self.target, self.draft = target, draft
        self.K = num_draft_tokens
        self.device = torch.device(device)
        self.max_requests, self.max_seq_len = max_requests, max_seq_len
        if max_batch is None:
            max_batch = min(max_requests, 64)
        if not 1 <= max_batch <= max_requests:
            raise ValueError(
                f"max_batch must be in 1..max_requests ({max_requests}), got {max_batch}; "
                "leave it unset for min(max_requests, 64)"
            )
        self.max_batch = max_batch
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id
        self.seed = check_int64("seed", seed)
        self.step = ChainStep(
            target,
            draft,
            num_draft_tokens=num_draft_tokens,
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
        )
        self.toggles = self.step.toggles
        self.stats = GenerationStats()
        self._free_slots = list(range(1, max_requests + 1)) + [0]  # slot 0 last: the single-request view slot
        self._free_rows = list(range(max_requests))
        self._last_slots: list[int] | None = None
        self._next_id = 0
        self._host_tokens: torch.Tensor | None = None
        #: (start, end) CUDA events around every step when ``record_step_events`` is set (benchmarks:
        #: summed elapsed times are the device's busy time, whatever the host did in between)
        self.record_step_events = False
        self.step_events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    @property
    def eos_token_id(self) -> tuple[int, ...]:
        """The ids that end a request (kept in its output); empty when none is set."""
        return self._eos

    @eos_token_id.setter
    def eos_token_id(self, value: int | Sequence[int] | None) -> None:
        self._eos = normalize_eos(value, self.vocab_size)

    @classmethod
    def for_example(cls, target, draft, **kwargs) -> SpecDecoder:
        """A decoder for the example models (``stepgraph.examples.model``)."""
        cfg = target.cfg
        return cls(
            target,
            draft,
            max_requests=cfg.max_requests,
            max_seq_len=cfg.max_seq_len,
            vocab_size=cfg.vocab_size,
            draft_hidden_size=draft.hidden_size,
            hidden_dtype=target.dtype,
            scratch_cache_row=cfg.scratch_row,
            device=target.device,
            **kwargs,
        )

    @property
    def runner(self):
        return self.step.runner

    @property
    def in_use(self) -> tuple[int, int]:
        """``(relay slots, cache rows)`` held by requests: ``(0, 0)`` between :meth:`generate` calls,
        also after one that raised."""
        return self.max_requests + 1 - len(self._free_slots), self.max_requests - len(self._free_rows)

    # ------------------------------------------------------------------------------------------------
    def warmup(self, max_running_requests: int | None = None, sampling: Sampling | str = Sampling.GREEDY):
        """Capture the keys for batch sizes 1..N before serving (see :meth:`StepGraphRunner.warmup`)."""
        return self.step.warmup(max_running_requests or self.max_batch, Sampling.parse(sampling))

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        max_new_tokens: int | Sequence[int] = 32,
        sampling: SamplingParams | Sequence[SamplingParams] = GREEDY,
        overlap: bool = False,
        on_step: Callable[[int], None] | None = None,
    ) -> list[list[int]]:
        """Generate for every prompt; returns the new tokens of each (EOS included when hit).

        ``on_step(batch_size)`` is called once per step on the host (scheduling work, for benchmarks).
        """
        n = len(prompts)
        if n == 0:
            return []
        limits = [max_new_tokens] * n if isinstance(max_new_tokens, int) else list(max_new_tokens)
        params = [sampling] * n if isinstance(sampling, SamplingParams) else list(sampling)
        if len(limits) != n or len(params) != n:
            raise ValueError("give one max_new_tokens and one SamplingParams per prompt (or one for all)")
        requests = [self._new_request(p, m, sp) for p, m, sp in zip(prompts, limits, params, strict=True)]
        torch.manual_seed(self.seed)  # the torch sampling paths draw from torch's generator
        loop = self._loop_overlapped if overlap else self._loop_sync
        prefill0, t0 = self.stats.prefill_seconds, time.perf_counter()
        try:
            loop(deque(requests), on_step)
        except BaseException:
            self._abandon(requests)
            raise
        self.stats.decode_seconds += time.perf_counter() - t0 - (self.stats.prefill_seconds - prefill0)
        return [r.output for r in requests]

    def _abandon(self, requests: list[Request]) -> None:
        """After an exception inside :meth:`generate`: give every slot and cache row back and clear the
        relay slots, so that the decoder serves the next call as if this one had not happened.

        The slots' clears are stream-ordered after every step already launched; the host waits for those
        steps first, so no step still in flight reads a slot that a later request gets.
        """
        if self.device.type == "cuda":
            with contextlib.suppress(Exception):  # a broken CUDA context: the original error says why
                torch.cuda.synchronize(self.device)
        for r in requests:
            if r.slot >= 0:
                self.step.relay.clear(r.slot)
                self._free_slots.append(r.slot)
            if r.cache_row >= 0:
                self._free_rows.append(r.cache_row)
            r.slot = r.cache_row = -1
        self._free_slots.sort(key=lambda s: (s == 0, s))
        self._free_rows.sort()
        self._last_slots = None

    def _new_request(self, prompt, max_new, params: SamplingParams) -> Request:
        prompt = token_ids(prompt)
        if not isinstance(params, SamplingParams):
            raise TypeError(f"sampling must be a SamplingParams (or one per prompt), got {type(params).__name__}")
        if not isinstance(max_new, numbers.Integral) or isinstance(max_new, bool):
            raise TypeError(f"max_new_tokens must be an int, got {max_new!r}")
        if not prompt:
            raise ValueError("empty prompt: give at least one token")
        if max_new < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new}")
        if min(prompt) < 0 or max(prompt) >= self.vocab_size:
            raise ValueError(f"prompt token ids must be in [0, {self.vocab_size}); got {min(prompt)}..{max(prompt)}")
        need = len(prompt) + max_new + 2 * (self.K + 1)
        if need > self.max_seq_len:
            raise ValueError(
                f"prompt ({len(prompt)}) + max_new_tokens ({max_new}) + 2*(K+1) = {need} exceeds max_seq_len "
                f"{self.max_seq_len}; lower max_new_tokens or build the models with a longer cache"
            )
        rid = self._next_id
        self._next_id += 1
        if params.seed is None:
            params = replace(params, seed=(self.seed * 1_000_003 + rid) % (INT64_MAX + 1))
        return Request(rid, prompt, max_new, params)

    # ---- prefill ---------------------------------------------------------------------------------
    def _prefill(self, r: Request) -> None:
        t0 = time.perf_counter()
        dev = self.device
        r.slot, r.cache_row = self._free_slots.pop(0), self._free_rows.pop(0)
        L = len(r.prompt)
        tokens = torch.tensor([r.prompt], dtype=torch.int64, device=dev)
        positions = torch.arange(L, device=dev)[None, :]
        rows = torch.tensor([r.cache_row], device=dev)
        logits, hidden = self.target(tokens, positions, rows)
        p = r.params
        seed = torch.tensor([p.seed], dtype=torch.int64, device=dev)
        offset = torch.zeros(1, dtype=torch.int64, device=dev)
        first = self._first_token(logits[:, -1:], p, seed, offset)  # [1]
        d_tokens = torch.cat([tokens, first[:, None]], 1)
        d_hidden = torch.cat([torch.zeros_like(hidden[:, :1]), hidden], 1)
        d_logits, d_hid = self.draft(d_tokens, torch.arange(L + 1, device=dev)[None, :], d_hidden, rows)
        self.step.relay.write(
            r.slot,
            token=first[0],
            draft=torch.argmax(d_logits[0, -1]),
            seq_len=L,
            cache_row=r.cache_row,
            hidden=d_hid[0, -1],
            temperature=p.temperature,
            top_k=p.top_k,
            top_p=p.top_p,
            seed=p.seed,
            offset=offset[0],
        )
        self._append(r, [int(first.item())])
        self.stats.prefill_seconds += time.perf_counter() - t0

    def _first_token(self, logits, p: SamplingParams, seed, offset) -> torch.Tensor:
        if p.sampling is Sampling.GREEDY:
            return torch.argmax(logits[:, 0], -1)
        dev = logits.device
        out = chain_verify_sampling(
            logits,
            torch.zeros((1, 0), dtype=torch.int64, device=dev),
            torch.tensor([p.temperature], dtype=torch.float32, device=dev),
            torch.tensor([p.top_k], dtype=torch.int64, device=dev),
            torch.tensor([p.top_p], dtype=torch.float32, device=dev),
            seed,
            offset,
            filtered=p.sampling is Sampling.TOP_K_TOP_P,
        )
        return out.bonus

    # ---- bookkeeping -----------------------------------------------------------------------------
    def _append(self, r: Request, tokens: list[int]) -> None:
        for tok in tokens:
            r.output.append(tok)
            if tok in self._eos:
                r.finished, r.finish_reason = True, "eos"
                return
            if len(r.output) >= r.max_new_tokens:
                r.finished, r.finish_reason = True, "length"
                return

    def _release(self, r: Request) -> None:
        self.step.relay.clear(r.slot)
        self._free_slots.append(r.slot)
        self._free_slots.sort(key=lambda s: (s == 0, s))
        self._free_rows.append(r.cache_row)
        r.slot = r.cache_row = -1

    def _admit(self, pending: deque, active: list[Request]) -> None:
        while pending and len(active) < self.max_batch and self._free_slots and self._free_rows:
            r = pending.popleft()
            self._prefill(r)
            if r.finished:  # one token was enough
                self._release(r)
            else:
                active.append(r)

    def _launch(self, batch: list[Request], on_step) -> dict:
        key = self.step.runner.key_for(len(batch))
        if key is not None and key.batch_size == 1 and self.step.relay.single_views and batch[0].slot != 0:
            self._move_to_slot0(batch[0])
        sampling = Sampling.most_general(r.params.sampling for r in batch)
        slots = [r.slot for r in batch]
        if on_step is not None:
            on_step(len(batch))
        record = self.record_step_events and self.device.type == "cuda"
        if record:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        if slots == self._last_slots:
            out = self.step.run(None, sampling, batch_size=len(batch))
        else:
            out = self.step.run(torch.tensor(slots, dtype=torch.int64), sampling)
            self._last_slots = slots
        if record:
            end.record()
            self.step_events.append((start, end))
        self.stats.steps += 1
        return out

    def _move_to_slot0(self, r: Request) -> None:
        """A lone request reads and writes slot 0 through views: move its state there once."""
        if 0 not in self._free_slots:
            self._drain_slot0()
        self._free_slots.remove(0)
        self.step.relay.move(r.slot, 0)
        old, r.slot = r.slot, 0
        self._retire_slot(old)

    def _retire_slot(self, slot: int) -> None:
        self.step.relay.clear(slot)
        self._free_slots.append(slot)
        self._free_slots.sort(key=lambda s: (s == 0, s))

    def _drain_slot0(self) -> None:  # overridden by the overlapped loop's pending frees
        raise RuntimeError("slot 0 is held by a live request while another request runs alone")

    def _read_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """The step's tokens on the host: one copy into a reused pinned buffer, then wait for it."""
        if tokens.device.type != "cuda":
            return tokens
        if self._host_tokens is None:
            self._host_tokens = torch.empty((self.max_batch, self.K + 1), dtype=torch.int64, pin_memory=True)
        host = self._host_tokens[: tokens.shape[0]]
        host.copy_(tokens, non_blocking=True)
        torch.cuda.current_stream(tokens.device).synchronize()
        return host

    def _consume(self, batch: list[Request], tokens: torch.Tensor) -> list[Request]:
        """Apply one step's tokens (``[B, K+1]`` on the host); return the requests that finished."""
        done = []
        rows = tokens.tolist()
        for r, row in zip(batch, rows, strict=True):
            if r.finished:  # overlapped loop: the extra step of a finished request
                self.stats.discarded_steps += 1
                continue
            emitted = [t for t in row if t >= 0]
            self.stats.request_steps += 1
            self.stats.emitted += len(emitted)
            self._append(r, emitted)
            if r.finished:
                done.append(r)
        return done

    # ---- loops -------------------------------------------------------------------------------------
    def _loop_sync(self, pending: deque, on_step) -> None:
        active: list[Request] = []
        self._last_slots = None
        while pending or active:
            self._admit(pending, active)
            if not active:
                break
            batch = list(active)
            out = self._launch(batch, on_step)
            for r in self._consume(batch, self._read_tokens(out["tokens"])):
                active.remove(r)
                self._release(r)

    def _loop_overlapped(self, pending: deque, on_step) -> None:
        active: list[Request] = []
        self._last_slots = None
        cuda = self.device.type == "cuda"
        pinned = [torch.empty((self.max_batch, self.K + 1), dtype=torch.int64, pin_memory=cuda) for _ in range(2)]
        inflight = None  # (batch, pinned tokens, event, requests to free after it)
        turn = 0
        waiting: list[tuple[torch.cuda.Event, list[Request]]] = []  # frees pending on a step's completion

        def free_completed(block: bool = False) -> None:
            while waiting and (block or waiting[0][0].query()):
                ev, reqs = waiting.pop(0)
                ev.synchronize()
                for r in reqs:
                    self._release(r)

        def drain_slot0() -> None:
            free_completed(block=True)
            if 0 not in self._free_slots:
                raise RuntimeError("slot 0 is held by a live request while another request runs alone")

        self._drain_slot0 = drain_slot0
        try:
            while pending or active or inflight is not None:
                free_completed()
                self._admit(pending, active)
                current = None
                if active:
                    batch = list(active)
                    out = self._launch(batch, on_step)
                    buf = pinned[turn % 2]
                    turn += 1
                    buf[: len(batch)].copy_(out["tokens"], non_blocking=True)
                    ev = torch.cuda.Event() if cuda else _Done()
                    ev.record()
                    current = (batch, buf, ev)
                if inflight is not None:
                    b, buf, ev = inflight
                    ev.synchronize()
                    finished = self._consume(b, buf[: len(b)])
                    for r in finished:
                        active.remove(r)
                    # the step just launched still reads their slots: free them when it completes
                    if finished:
                        waiting.append((current[2] if current is not None else ev, finished))
                inflight = current
            free_completed(block=True)
        finally:
            del self._drain_slot0

    def info(self) -> dict:
        return {**self.step.info(), "generation": self.stats.as_dict()}

    def release(self) -> None:
        """Release every graph of the step (the step runs eagerly until it captures again). Under tensor
        parallelism, call it before ``dist.destroy_process_group()``."""
        self.step.release()

    def device_step_ms(self, batch_size: int, steps: int = 50) -> float:
        """Device time of one step at ``batch_size``: back-to-back replays of its captured graph with no
        host sync in between (milliseconds; NaN when the key has no graph). The relay state is restored
        afterwards. For benchmarks."""
        key = self.runner.key_for(batch_size)
        captured = self.runner.stats(key).captured if key is not None else None
        if captured is None:
            return float("nan")
        saved = {n: f.clone() for n, f in self.step.relay.fields.items()}
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            captured.replay()
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) / steps * 1e3
        for n, f in self.step.relay.fields.items():
            f.copy_(saved[n])
        return ms


class _Done:
    """The event of a step on the CPU: work there is synchronous, so it has always completed."""

    def record(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


def token_ids(prompt) -> list[int]:
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
