"""The decode loops: admit requests (prefill), launch chain steps, apply their tokens, let finished
requests go. Requests of different lengths share a batch; finished ones leave and waiting ones join, so
the key changes as the batch shrinks and grows.

* synchronous (``overlap=False``, the reference): launch step N, read its tokens, decide step N+1. The
  draft-length policy works while step N runs: it learns what step N-1 accepted and picks step N+1's K
  (kept if step N leaves the batch and the choice as they were), so its host time stays off the step's
  path;
* overlapped (``overlap=True``): launch step N+1 *before* reading step N's tokens. Step N+1 reads its
  inputs from the relay slots step N wrote, on the device; step N's tokens come back through a
  non-blocking copy into pinned memory and an event. EOS and length limits are therefore seen one step
  late: a request that finished at step N also runs step N+1, whose output is discarded. A slot (and
  cache row) is reused only after every step that reads it has completed. On the CPU the same loop runs
  (its copies and events are synchronous), which is how it is tested without a GPU.

With ``prefill_chunk`` prompts go through in chunks, one forward of that many positions between two
steps (several requests' chunks together: :mod:`stepgraph.speculative.chunk_forward`), so that arriving
prompts do not stall the requests decoding; a request joins the batch after its last chunk.

With a paged KV cache a request joins once its prompt's pages can be had, and each step first asks for
the pages its requests will write (:meth:`SlotAllocator.grow`); one that cannot have them now sits the
step out (counted in ``stalled``) and runs again when others give pages back.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections import deque
from collections.abc import Callable, Iterator

import torch

from stepgraph.outputs import StepOutputs
from stepgraph.sampling import Sampling
from stepgraph.speculative.draft_policy import DraftPolicy, FixedDraftLength, beyond_reach
from stepgraph.speculative.prefill import Prefill
from stepgraph.speculative.request_queue import RequestQueue
from stepgraph.speculative.requests import ABORTS, GenerationStats, Request
from stepgraph.speculative.slots import SlotAllocator
from stepgraph.speculative.step import ChainStep

OnStep = Callable[[int], None]
SCORES = ("logprobs", "top_ids", "top_logprobs")  # a step's outputs when it reports log-probabilities


class Scheduler:
    """Runs requests to completion over a :class:`ChainStep`.

    ``prefill(request) -> (first token, its scores or None)`` fills a request's cache row and relay slot.
    ``policy`` picks each step's draft length (:mod:`stepgraph.speculative.draft_policy`; default: the
    step's first) and learns from what each step accepted. ``record_step_events``
    records a (start, end) CUDA event pair around every step in ``step_events`` and every prefill in
    ``prefill_events`` (benchmarks: summed elapsed times are the device's busy time, whatever the host
    did in between).
    """

    def __init__(
        self,
        step: ChainStep,
        slots: SlotAllocator,
        prefill: Prefill,
        *,
        max_batch: int,
        device: torch.device,
        policy: DraftPolicy | None = None,
    ) -> None:
        self.step, self.slots, self.prefill = step, slots, prefill
        self.policy: DraftPolicy = policy or FixedDraftLength(step.K)
        self.max_batch, self.device = max_batch, device
        self.width = step.max_draft_len + 1  # a step's tokens per request, at the longest draft
        self.stats = GenerationStats()
        self.record_step_events = False
        self.step_events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self.prefill_events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self._last_slots: list[int] | None = None
        self._last_batch: list[Request] | None = None  # the requests of the last step, and their class:
        self._evidence: list[tuple] = []  # (live, accepted, K, done) of steps the policy has not learnt yet
        self._plan: tuple[list[Request], int] | None = None  # (batch, K) chosen ahead for the next step
        self._sampling = Sampling.GREEDY  # recomputed only when requests join or leave
        self._penalised = False  # whether one of them sets a penalty (also recomputed then)
        self._host: dict[tuple[str, int], torch.Tensor] = {}  # (output, turn) -> pinned [max_batch, width, ...]
        self._t0 = 0.0
        self.prefill_chunk = prefill.chunk  # positions of prompt per step (None: whole prompts)
        self._prefilling: deque[Request] = deque()  # admitted, their prompts going through in chunks
        self._source: RequestQueue | None = None  # where a run's requests also come from (online serving)
        self._taken: list[Request] = []  # every request of the run so far
        self._aborts_seen = -1  # the count of aborts when the loop last looked for aborted requests

    # ---- requests in and out ---------------------------------------------------------------------
    def admit(self, r: Request) -> None:
        """Give ``r`` a slot and a cache row and prefill it (its first token appended)."""
        t0 = time.perf_counter()
        self.slots.take(r)
        with self._recorded(self.prefill_events):
            first, scores = self.prefill(r)
        r.append([first], scores)
        self.stats.prefill_seconds += time.perf_counter() - t0

    @contextlib.contextmanager
    def _recorded(self, events: list) -> Iterator[None]:
        """A (start, end) CUDA event pair around the block, when ``record_step_events`` is on."""
        if not (self.record_step_events and self.device.type == "cuda"):
            yield
            return
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        stream = torch.cuda.current_stream(self.device)  # asked once for both records
        start.record(stream)
        yield
        end.record(stream)
        events.append((start, end))

    def _admit_waiting(self, pending: deque, active: list[Request]) -> None:
        now = time.perf_counter() - self._t0
        while (
            pending
            and len(active) + len(self._prefilling) < self.max_batch
            and pending[0].arrival <= now
            and self.slots.can_take(pending[0])
        ):
            r = pending.popleft()
            if r.aborted:  # ended before it was admitted
                r.end_aborted()
                continue
            if self.prefill_chunk is not None:  # its prompt goes through in chunks, between steps
                self.slots.take(r)
                self._prefilling.append(r)
            else:
                self.admit(r)
                self._joined(r, active)

    def _joined(self, r: Request, active: list[Request]) -> None:
        if r.finished:  # one token was enough
            self.slots.give_back(r)
        else:
            active.append(r)

    def _prefill_chunks(self, active: list[Request]) -> None:
        """One forward of prompt chunks (``prefill_chunk`` positions in all) for the oldest requests being
        prefilled, as many as the chunk forward's sizes take; a request whose prompt is done joins
        ``active``."""
        if not self._prefilling:
            return
        rs = list(itertools.islice(self._prefilling, self.prefill.chunks.pack(len(self._prefilling))))
        t0 = time.perf_counter()
        with self._recorded(self.prefill_events):
            results = self.prefill.next_chunks(rs)
        self.stats.prefill_seconds += time.perf_counter() - t0
        for r, done in zip(rs, results):
            if done is not None:
                self._prefilling.remove(r)
                # it joins now; its first token is taken with its first step's tokens, so that step is
                # launched without waiting for this forward (unless that token is all it asked for)
                r.first_pending = done
                if r.max_new_tokens == 1:
                    r.settle()
                self._joined(r, active)

    def launch(
        self,
        batch: list[Request],
        on_step: OnStep | None = None,
        drain: Callable[[], None] | None = None,
        draft_len: int | None = None,
    ) -> StepOutputs:
        """Launch one chain step for ``batch`` with ``draft_len`` draft tokens (default: the policy's choice);
        a lone request moves to the view slot first. Returns its outputs (``tokens [B, K+1]``,
        ``num_accepted [B]``), valid until the next step."""
        if len(batch) == 1 and self.step.relay.single_views and batch[0].slot != 0:
            key = self.step.runner.key_for(1)
            if key is not None and key.batch_size == 1:
                self.slots.move_to_slot0(batch[0], drain)
        if batch != self._last_batch:  # requests joined or left (a slot may have changed hands)
            self._sampling = Sampling.most_general(r.params.sampling for r in batch)
            self._penalised = any(r.params.needs_penalty_state is not None for r in batch)
            self._last_batch = list(batch)  # a copy: a caller may change its list in place
        sampling, penalised = self._sampling, self._penalised
        plan, self._plan = self._plan, None
        if draft_len is None and plan is not None and plan[0] == batch and beyond_reach(batch, self.width - 1):
            draft_len = plan[1]  # chosen during the last step; its tokens cannot change the choice
        elif draft_len is None:
            draft_len = self.policy.choose(batch, self._bucket(batch))
        self.stats.draft_len_steps[draft_len] += 1
        self.stats.penalised_steps += penalised
        slots = [r.slot for r in batch]
        changed = slots != self._last_slots
        kv_inputs = None
        if self.step.kv_buffers:
            kv_inputs = self.slots.kv.step_inputs([r.cache_row for r in batch], changed, self.step.kv_buffers)
        if on_step is not None:
            on_step(len(batch))
        with self._recorded(self.step_events):
            if not changed:
                out = self.step.run(
                    None, sampling, batch_size=len(batch), draft_len=draft_len, kv_inputs=kv_inputs, penalised=penalised
                )
            else:  # the slots go in as a list: no tensor is made
                out = self.step.run(slots, sampling, draft_len=draft_len, kv_inputs=kv_inputs, penalised=penalised)
                self._last_slots = slots
                self.stats.batch_changes += 1
        self.stats.steps += 1
        return out

    def _bucket(self, batch: list[Request]) -> int:
        key = self.step.runner.key_for(len(batch))
        return key.batch_size if key is not None else len(batch)

    def learn_and_plan(self, batch: list[Request]) -> None:
        """The policy's work for the step in flight (``batch``'s), done while it runs: learn what the steps
        before it accepted (:meth:`consume` with ``learn=False``), then choose the next step's K for the
        same batch (unless the policy is ``instant``). :meth:`launch` takes that K if the batch is the same and
        no request is near its length limit (:func:`~stepgraph.speculative.draft_policy.beyond_reach`), and
        chooses again otherwise."""
        self.learn()
        if not getattr(self.policy, "instant", False) and beyond_reach(batch, self.width - 1):
            self._plan = (list(batch), self.policy.choose(batch, self._bucket(batch)))

    def learn(self) -> None:
        """Teach the policy what the consumed steps accepted and forget their finished requests."""
        evidence, self._evidence = self._evidence, []
        forget = getattr(self.policy, "forget", None)
        for live, accepted, draft_len, done in evidence:
            if live:
                self.policy.observe(live, accepted, draft_len)
            for r in done if forget is not None else ():
                forget(r)

    def read_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """A step's tokens on the host: one copy into a reused pinned buffer, then wait for it."""
        return self.read_outputs({"tokens": tokens})["tokens"]

    def read_outputs(self, out, turn: int = 0, wait: bool = True) -> dict[str, torch.Tensor]:
        """A step's ``tokens`` (and its scores, when it reports them: ``logprobs``, ``top_ids``,
        ``top_logprobs``) copied into reused pinned host buffers of ``turn`` (the overlapped loop
        alternates two); waits for the copies unless ``wait`` is false. On the CPU: the tensors."""
        names = ("tokens", *(n for n in SCORES if n in out))
        if out["tokens"].device.type != "cuda" and wait:
            return {n: out[n] for n in names}
        host = {}
        for n in names:
            t = out[n]
            buf = self._host.get((n, turn))
            if buf is None:
                shape = (self.max_batch, self.width, *t.shape[2:])
                buf = self._host[(n, turn)] = torch.empty(shape, dtype=t.dtype, pin_memory=t.is_cuda)
            host[n] = buf[: t.shape[0], : t.shape[1]]
            host[n].copy_(t, non_blocking=True)
        if wait and out["tokens"].is_cuda:
            torch.cuda.current_stream(out["tokens"].device).synchronize()
        return host

    def consume(
        self, batch: list[Request], tokens: torch.Tensor, scores: dict | None = None, *, learn: bool = True
    ) -> list[Request]:
        """Apply one step's tokens (``[B, K+1]`` on the host; ``scores``: the rest of :meth:`read_outputs`,
        when the step reports them); return the requests that finished. The policy learns what each live
        request accepted (``K + 1`` columns: K drafts): now, or with ``learn=False`` at the next
        :meth:`learn`."""
        done, live, accepted = [], [], []
        # host arrays (copies: the buffers take the next step's), which each request keeps by reference and
        # turns into lists, of the rows it took, only when they are read
        arrays = [scores[n].numpy().copy() for n in SCORES] if scores and "logprobs" in scores else None
        for b, (r, row) in enumerate(zip(batch, tokens.tolist(), strict=True)):
            row_scores = tuple(a[b] for a in arrays) if arrays is not None else None
            if r.settle() and r.finished:  # its first token (a chunked prefill's) ended it: a step for nothing
                done.append(r)
            if r.finished:  # or the overlapped loop's extra step of a finished request
                self.stats.discarded_steps += 1
                continue
            emitted = [t for t in row if t >= 0]
            self.stats.request_steps += 1
            self.stats.emitted += len(emitted)
            live.append(r)
            accepted.append(len(emitted) - 1)
            r.append(emitted, row_scores)
            if r.finished:
                done.append(r)
        self._evidence.append((live, accepted, tokens.shape[1] - 1, done))
        if learn:
            self.learn()
        return done

    def runnable(self, active: list[Request], drain: Callable[[], None] | None = None) -> list[Request]:
        """The requests of ``active`` that get room for their next step (the rest sit it out). When none
        does, ``drain`` gives back the pages of finished requests whose last step is in flight first."""
        batch = self.slots.grow(list(active))
        if not batch and drain is not None:
            drain()
            batch = self.slots.grow(list(active))
        if not batch:
            raise RuntimeError(f"no request of {len(active)} can have pages for its next step; {self.slots.kv.info()}")
        self.stats.stalled += len(active) - len(batch)
        return batch

    # ---- loops -------------------------------------------------------------------------------------
    def run(
        self,
        requests: list[Request],
        *,
        overlap: bool,
        on_step: OnStep | None = None,
        source: RequestQueue | None = None,
    ) -> list[Request]:
        """Run ``requests`` to completion, each joining once its ``arrival`` (seconds from now) has passed,
        and with ``source`` the requests put in it, each joining when taken, until it is closed; returns
        every request run. A request that :meth:`Request.abort` ended leaves before its next step.
        Whatever raises, every slot and cache row comes back first."""
        self._last_slots = self._last_batch = self._plan = None
        self._t0 = time.perf_counter()
        self._source, self._taken = source, list(requests)
        self._aborts_seen = -1  # look once: requests may have been aborted before the run
        pending = deque(sorted(requests, key=lambda r: r.arrival))
        try:
            (self._loop_overlapped if overlap else self._loop_sync)(pending, on_step)
        except BaseException:
            self._plan = None
            with contextlib.suppress(Exception):  # what was raised first is what reaches the caller
                self.learn()
            self._prefilling.clear()
            self.slots.give_back_all(self._taken, self.device)
            self._last_slots = self._last_batch = None
            raise
        finally:
            self._source = None
        return self._taken

    def _more_coming(self) -> bool:
        return self._source is not None and self._source.open()

    def _take_new(self, pending: deque) -> None:
        """The requests put in the source since the last call join ``pending``, arrived now."""
        if self._source is None:
            return
        new = self._source.take()
        now = time.perf_counter() - self._t0
        for r in new:
            r.arrival = now
        pending.extend(new)
        self._taken.extend(new)

    def _drop_aborted(self, pending: deque, active: list[Request], release: Callable[[Request], None]) -> None:
        """Let the requests that :meth:`Request.abort` ended go: waiting, being prefilled (their slots back
        now: no step reads them) or decoding (``release`` gives their slots back, once no step in flight
        reads them). Looks only when an abort happened since it last looked."""
        if ABORTS[0] == self._aborts_seen:
            return
        self._aborts_seen = ABORTS[0]
        for r in [r for r in pending if r.aborted]:
            pending.remove(r)
            r.end_aborted()
        for r in [r for r in self._prefilling if r.aborted]:
            self._prefilling.remove(r)
            r.end_aborted()
            self.slots.give_back(r)
        forget = getattr(self.policy, "forget", None)
        for r in [r for r in active if r.aborted]:
            active.remove(r)
            r.end_aborted()
            release(r)
            if forget is not None:
                forget(r)

    def _loop_sync(self, pending: deque, on_step: OnStep | None) -> None:
        active: list[Request] = []
        while pending or active or self._prefilling or self._more_coming():
            self._take_new(pending)
            self._admit_waiting(pending, active)
            self._prefill_chunks(active)
            self._drop_aborted(pending, active, self.slots.give_back)  # no step in flight here
            if not active:
                if not self._prefilling:
                    self._wait_for_arrival(pending)
                continue
            batch = self.runnable(active)
            out = self.launch(batch, on_step)
            self.learn_and_plan(batch)  # host work while the step runs
            host = self.read_outputs(out)
            for r in self.consume(batch, host["tokens"], host, learn=False):
                active.remove(r)
                self.slots.give_back(r)
        self.learn()
        self._plan = None

    def _loop_overlapped(self, pending: deque, on_step: OnStep | None) -> None:
        active: list[Request] = []
        cuda = self.device.type == "cuda"
        inflight = None  # (batch, its outputs on the host (tokens [B, K+1], ...), event)
        turn = 0
        waiting: list[tuple] = []  # (event, requests): frees pending on a step's completion

        def free_completed(block: bool = False) -> None:
            while waiting and (block or waiting[0][0].query()):
                ev, reqs = waiting.pop(0)
                ev.synchronize()
                for r in reqs:
                    self.slots.give_back(r)

        def release(r: Request) -> None:  # an aborted request's slot, once the step in flight has completed
            if inflight is None:
                self.slots.give_back(r)
            else:
                waiting.append((inflight[2], [r]))

        while pending or active or inflight is not None or self._prefilling or self._more_coming():
            free_completed()
            self._take_new(pending)
            self._admit_waiting(pending, active)
            self._prefill_chunks(active)
            self._drop_aborted(pending, active, release)
            if not active and inflight is None:
                if not self._prefilling:
                    self._wait_for_arrival(pending, drain=lambda: free_completed(block=True))
                continue
            current = None
            if active:
                batch = self.runnable(active, drain=lambda: free_completed(block=True))
                out = self.launch(batch, on_step, drain=lambda: free_completed(block=True))
                buf = self.read_outputs(out, turn=1 + turn % 2, wait=False)  # this step's, copied as it ends
                turn += 1
                ev = torch.cuda.Event() if cuda else _Done()
                ev.record()
                current = (batch, buf, ev)
            if inflight is not None:
                b, buf, ev = inflight
                ev.synchronize()
                finished = self.consume(b, buf["tokens"], buf)
                for r in finished:
                    active.remove(r)
                # the step just launched still reads their slots: free them when it completes
                if finished:
                    waiting.append((current[2] if current is not None else ev, finished))
            inflight = current
        free_completed(block=True)

    def _wait_for_arrival(self, pending: deque, drain: Callable[[], None] | None = None) -> None:
        """Nothing runs: sleep until the next request arrives (or is put in the source), or (it has arrived
        but found no free slot) ``drain`` the slots of finished requests whose last step is still in
        flight."""
        if not pending:
            if self._more_coming():
                t0 = time.perf_counter()
                self._source.wait()
                self.stats.idle_seconds += time.perf_counter() - t0
            return
        delay = pending[0].arrival - (time.perf_counter() - self._t0)
        if delay > 0:
            t0 = time.perf_counter()
            time.sleep(delay)
            self.stats.idle_seconds += time.perf_counter() - t0  # no step and no prefill ran
            return
        if drain is not None:
            drain()
        if not self.slots.can_take(pending[0]):
            raise RuntimeError(f"no room for a request while none runs: {self.slots.kv.info()}")


class _Done:
    """The event of a step on the CPU: work there is synchronous, so it has always completed."""

    def record(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass
