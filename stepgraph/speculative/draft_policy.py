"""How many draft tokens each step takes: a fixed K, a schedule by batch size, or ``"auto"``.

Speculation pays while the step is bound by memory (a few requests) and costs once it is bound by compute
(many requests): every rejected draft token is target work thrown away. A policy picks each step's K
from the draft lengths the step was built with (each K has its own keys, so a change of K is a change of
key, captured ahead like any other):

* :class:`FixedDraftLength`: the same K every step;
* :class:`DraftSchedule`: ``{batch size: K}``, the K of the largest scheduled size at or below the batch;
* :class:`AutoDraftLength`: the K that maximises the batch's expected tokens per second, from each
  request's acceptance so far and the measured step time of every (batch bucket, K) key (a longer K only
  when it promises a margin more than a shorter one).

For a chain of K drafts whose tokens are each accepted with probability ``a`` (given the ones before),
a step emits ``1 + a + ... + a^K = (1 - a^(K+1)) / (1 - a)`` tokens on average (the accepted drafts and
one more), of which a request near its ``max_new_tokens`` keeps only what it still wants (the policy counts
no more). A request's ``a`` is estimated from what its steps accepted: ``accepted / (accepted +
rejections)``, a step with ``n < K`` accepted counting one rejection, with older steps weighing less,
shrunk towards the decoder's pooled estimate (a request with no steps yet takes the pool's). The pool
learns once a step from the whole batch, so its memory is counted in steps at any batch size. A step of
plain decoding says nothing about the draft, so it only fades the evidence (each request's, and the
pool's once): after an unlucky start that made ``K = 0`` look best, the estimates drift back towards
the prior and drafting is tried again, instead of plain decoding holding for good.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from stepgraph.keys import draft_lengths

#: The draft lengths ``"auto"`` chooses among by default (0: plain decoding).
AUTO_DRAFT_LENS = (0, 1, 2, 3, 5)


def expected_tokens(draft_len: int, acceptance: float) -> float:
    """Tokens a chain of ``draft_len`` drafts emits per step at per-token acceptance ``acceptance``."""
    a = min(max(acceptance, 0.0), 1.0)
    if a >= 1.0:
        return draft_len + 1.0
    return (1.0 - a ** (draft_len + 1)) / (1.0 - a)


def step_evidence(accepted: int, draft_len: int) -> tuple[int, int]:
    """``(accepted, trials)`` that a step of ``draft_len`` drafts which accepted ``accepted`` tells of: each
    accepted draft, and the rejection that ended the chain early. Plain decoding tells of none."""
    if draft_len <= 0:
        return 0, 0
    return accepted, accepted + (1 if accepted < draft_len else 0)


@dataclass
class Acceptance:
    """A running estimate of one request's (or the pool's) per-token acceptance, recent steps weighing
    more (``decay`` per observation); ``prior`` stands in until there is evidence."""

    decay: float = 0.9
    accepted: float = 0.0
    trials: float = 0.0

    def observe(self, accepted: int, draft_len: int) -> None:
        """A step of ``draft_len`` drafts accepted ``accepted``; plain decoding (0) only fades the evidence."""
        self.add(*step_evidence(accepted, draft_len))

    def add(self, accepted: float, trials: float) -> None:
        """One step's evidence, however many requests it sums: what came before weighs ``decay`` less."""
        self.accepted = self.accepted * self.decay + accepted
        self.trials = self.trials * self.decay + trials

    def estimate(self, prior: float, weight: float = 2.0) -> float:
        """The estimate, shrunk towards ``prior`` with ``weight`` trials' worth of evidence."""
        return (self.accepted + weight * prior) / (self.trials + weight)


class DraftPolicy(Protocol):
    """Picks each step's draft length and learns from what the step accepted.

    The synchronous loop calls both while a step runs: ``observe`` with the step before it, then
    ``choose`` for the step after it (an answer it drops when the batch changes in between, asking again),
    so ``choose`` should depend only on the batch and on what ``observe`` taught it. A policy whose
    ``choose`` costs nothing says so with a class attribute ``instant = True``: it is asked at launch only.
    """

    def choose(self, batch: Sequence, bucket: int) -> int:
        """The K for a step of ``batch`` (its requests) padded to ``bucket``."""
        ...

    def observe(self, batch: Sequence, accepted: Sequence[int], draft_len: int) -> None:
        """What a step of ``draft_len`` drafts accepted for each request of ``batch``."""
        ...


@dataclass
class FixedDraftLength:
    """The same K every step."""

    instant: ClassVar[bool] = True
    draft_len: int

    def choose(self, batch: Sequence, bucket: int) -> int:
        return self.draft_len

    def observe(self, batch: Sequence, accepted: Sequence[int], draft_len: int) -> None:
        pass


@dataclass
class DraftSchedule:
    """``{batch size: K}``: a batch takes the K of the largest scheduled size at or below its size (sizes
    below the smallest take the smallest's), as TensorRT-LLM's ``draft_len_schedule`` does."""

    instant: ClassVar[bool] = True
    schedule: Mapping[int, int]

    def __post_init__(self) -> None:
        if not self.schedule:
            raise ValueError("a draft-length schedule needs at least one {batch size: K} entry")
        for b, k in self.schedule.items():
            if not (isinstance(b, int) and b >= 1 and isinstance(k, int) and k >= 0):
                raise ValueError(f"a draft-length schedule maps batch sizes >= 1 to K >= 0, got {b!r}: {k!r}")
        self._sizes = sorted(self.schedule)

    def choose(self, batch: Sequence, bucket: int) -> int:
        i = bisect.bisect_right(self._sizes, len(batch)) - 1
        return self.schedule[self._sizes[max(i, 0)]]

    def observe(self, batch: Sequence, accepted: Sequence[int], draft_len: int) -> None:
        pass


@dataclass
class AutoDraftLength:
    """The K that maximises expected tokens per second for the batch at hand.

    ``step_ms(bucket, K)`` is the measured time of a step of that key (the decoder measures every key at
    warm-up; see :meth:`SpecDecoder.warmup`). Each request's acceptance is kept per request (by its id) and
    pooled over all requests, which is what a new request starts from (``prior`` before any evidence).
    ``decay``: the weight of a step's evidence one step later. ``pool_weight``: the trials' worth of
    evidence the pooled estimate counts for in a request's own, so that a few unlucky steps do not decide
    a request's K. ``margin``: how much more a longer draft must promise than a shorter one, as a fraction
    of its tokens per second. The expectation leaves out what a longer chain costs beyond its mean: the
    drafts a request's last step throws away, the spread that sets when a batch's slowest request ends,
    and the noise in the measured step times and the acceptance estimate. Near a tie the shorter draft
    wins, and its rejected drafts waste less target work.
    """

    draft_lens: tuple[int, ...] = AUTO_DRAFT_LENS
    prior: float = 0.6
    decay: float = 0.97
    pool_weight: float = 20.0
    margin: float = 0.02
    step_ms: Callable[[int, int], float] | None = None
    pool: Acceptance | None = None  # default: an empty one with ``decay``
    _requests: dict[int, Acceptance] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.margin < 1.0:
            raise ValueError(f"margin is a fraction of tokens per second in [0, 1), got {self.margin!r}")
        if self.pool is None:
            self.pool = Acceptance(self.decay)

    def acceptance(self, request) -> float:
        own = self._requests.get(request.id)
        pooled = self.pool.estimate(self.prior)
        return pooled if own is None else own.estimate(pooled, self.pool_weight)

    def choose(self, batch: Sequence, bucket: int) -> int:
        if self.step_ms is None:
            raise RuntimeError("draft length 'auto' has no step times: warm the decoder up first")
        # the batch's expected tokens for every K at once: sum_i E(K, a_i) = sum_{j <= K} sum_i a_i^j, each
        # request's terms stopping at the tokens it still wants (plain Python: a few us at small batches)
        pooled, w, own = self.pool.estimate(self.prior), self.pool_weight, self._requests
        lens = sorted(self.draft_lens)
        longest = lens[-1]
        sums = [0.0] * (longest + 1)  # sums[j] = sum_i a_i^j
        for r in batch:
            a = own.get(r.id)
            alpha = min(max(pooled if a is None else (a.accepted + w * pooled) / (a.trials + w), 0.0), 1.0)
            power = 1.0
            for j in range(1, min(longest, _tokens_left(r) - 1) + 1):
                power *= alpha
                sums[j] += power
        tokens = list(itertools.accumulate(sums, initial=float(len(batch))))[1:]  # tokens[K] = sum_i E(K, a_i)
        best, best_rate = None, -1.0
        for k in lens:  # a longer draft must beat the best shorter one by the margin
            rate = tokens[k] / self.step_ms(bucket, k)
            if rate > best_rate * (1 + self.margin + 1e-9):
                best, best_rate = k, rate
        return best

    def observe(self, batch: Sequence, accepted: Sequence[int], draft_len: int) -> None:
        requests, step_accepted, step_trials = self._requests, 0, 0
        for r, n in zip(batch, accepted, strict=True):
            own = requests.get(r.id)
            if own is None:
                own = requests[r.id] = Acceptance(self.decay)
            n, trials = step_evidence(n, draft_len)
            own.add(n, trials)
            step_accepted += n
            step_trials += trials
        # the pool learns once a step, from the whole batch: its memory counts steps, not requests (a plain
        # step fades it, so drafting is tried again)
        self.pool.add(step_accepted, step_trials)

    def forget(self, request) -> None:
        """A finished request's estimate goes (the pool keeps what it learnt)."""
        self._requests.pop(request.id, None)


@dataclass
class SimulatedRequest:
    """A request of :func:`simulate`: its id, its length limit and what it has emitted so far."""

    id: int
    max_new_tokens: int
    output: list[int] = field(default_factory=list)


def simulate(
    policy: DraftPolicy,
    acceptance: float,
    batch: int,
    tokens: int,
    step_ms: Callable[[int, int], float],
    *,
    buckets: Sequence[int] = (1, 4, 8, 16, 32, 64),
    seed: int = 0,
) -> tuple[float, dict[int, int]]:
    """Tokens per second, and the K taken per step, of ``batch`` requests of ``tokens`` new tokens each
    decoded under ``policy``, on the host alone: for choosing and testing policies without a GPU.

    A step at batch bucket ``b`` with ``K`` drafts takes ``step_ms(b, K)`` milliseconds (a decoder's
    :meth:`~stepgraph.SpecDecoder.step_times`, say). The draft at each output position of a request is
    accepted when that position's draw (from ``seed``) is below ``acceptance``, as a twin draft's agreement
    is a property of the position, so every policy meets the same draws. Requests leave as they reach
    ``tokens``, and the batch's bucket shrinks with them. As in the scheduler's synchronous loop, the
    policy learns a step's acceptance during the next step, when it also picks the K after that.
    """
    rng = random.Random(seed)
    draws = [[rng.random() for _ in range(tokens)] for _ in range(batch)]

    def accepted_at(i: int, position: int) -> bool:  # past the last token: a draw of its own, as fixed
        u = draws[i][position] if position < tokens else random.Random(hash((seed, i, position))).random()
        return u < acceptance

    live = [SimulatedRequest(i, tokens) for i in range(batch)]
    ms, taken = 0.0, Counter()

    def learn(evidence: tuple) -> None:
        policy.observe(*evidence[:3])
        for r in evidence[3]:
            getattr(policy, "forget", lambda r: None)(r)

    longest = max(getattr(policy, "draft_lens", (1,)))
    evidence, plan = None, None  # as the synchronous loop: learnt, and the next K chosen, during a step
    while live:
        bucket = min((b for b in buckets if b >= len(live)), default=len(live))
        planned = plan is not None and plan[0] == [r.id for r in live] and beyond_reach(live, longest)
        k = plan[1] if planned else policy.choose(live, bucket)
        taken[k] += 1
        ms += step_ms(bucket, k)
        if evidence is not None:
            learn(evidence)
        plan = ([r.id for r in live], policy.choose(live, bucket)) if beyond_reach(live, longest) else None
        accepted = []
        for r in live:
            made, n = len(r.output), 0
            while n < k and accepted_at(r.id, made + n):
                n += 1
            accepted.append(n)
            r.output.extend([0] * min(n + 1, tokens - made))
        evidence = (live, accepted, k, [r for r in live if len(r.output) >= tokens])
        live = [r for r in live if len(r.output) < tokens]
    if evidence is not None:  # the last step's, after the loop
        learn(evidence)
    return batch * tokens / ms * 1e3, dict(taken)


def beyond_reach(batch: Sequence, longest: int) -> bool:
    """Whether every request of ``batch`` still wants more than ``longest`` tokens, so that a choice among
    draft lengths up to ``longest`` does not depend on how many it has emitted: a K chosen for the batch
    while a step runs is the K chosen after it."""
    return all(_tokens_left(r) > longest for r in batch)


def _tokens_left(request) -> int | float:
    """The tokens ``request`` may still emit (its ``max_new_tokens`` less its output; unbounded without them)."""
    limit = getattr(request, "max_new_tokens", None)
    return float("inf") if limit is None else limit - len(request.output)


def draft_policy(num_draft_tokens) -> tuple[tuple[int, ...], DraftPolicy]:
    """The draft lengths to build keys for and the policy, from a decoder's ``num_draft_tokens``: an int,
    several ints (each with keys; the first taken), a ``{batch size: K}`` schedule, ``"auto"``, or a
    policy object (:class:`AutoDraftLength` with lengths of its own, say).

    Raises
    ------
    ValueError / TypeError
        For anything else, naming what is accepted.
    """
    if isinstance(num_draft_tokens, str):
        if num_draft_tokens != "auto":
            raise ValueError(
                f"num_draft_tokens={num_draft_tokens!r}: give an int, a list, a {{batch: K}} schedule or 'auto'"
            )
        num_draft_tokens = AutoDraftLength()
    if isinstance(num_draft_tokens, AutoDraftLength):
        return draft_lengths(num_draft_tokens.draft_lens), num_draft_tokens
    if isinstance(num_draft_tokens, Mapping):
        num_draft_tokens = DraftSchedule(dict(num_draft_tokens))
    if isinstance(num_draft_tokens, DraftSchedule):
        return draft_lengths(sorted(set(num_draft_tokens.schedule.values()))), num_draft_tokens
    if isinstance(num_draft_tokens, FixedDraftLength):
        return draft_lengths((num_draft_tokens.draft_len,)), num_draft_tokens
    lens = draft_lengths(num_draft_tokens)
    return lens, FixedDraftLength(lens[0])
