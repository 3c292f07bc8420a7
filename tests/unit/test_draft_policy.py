"""Draft-length policies: the expected-tokens model, acceptance estimates, schedules and the auto choice."""

import pytest

from stepgraph.speculative.draft_policy import (
    Acceptance,
    AutoDraftLength,
    DraftSchedule,
    FixedDraftLength,
    draft_policy,
    expected_tokens,
    simulate,
)


class R:
    def __init__(self, rid):
        self.id = rid


def test_expected_tokens_of_a_chain():
    assert expected_tokens(0, 0.5) == 1.0
    assert expected_tokens(3, 1.0) == 4.0
    assert expected_tokens(3, 0.0) == 1.0
    assert expected_tokens(2, 0.5) == pytest.approx(1.75)


def test_acceptance_is_estimated_from_what_steps_accepted():
    a = Acceptance(decay=1.0)
    assert a.estimate(0.6) == pytest.approx(0.6)  # no evidence: the prior
    for n in (3, 3, 1, 0):  # K = 3: two full chains, then a rejection after one, then at once
        a.observe(n, 3)
    assert a.estimate(0.6) == pytest.approx((7 + 1.2) / (7 + 2 + 2))
    a.observe(5, 0)  # plain decoding says nothing
    assert a.trials == 9


def test_a_schedule_takes_the_largest_size_at_or_below_the_batch():
    s = DraftSchedule({1: 4, 8: 2, 32: 0})
    assert [s.choose([0] * b, b) for b in (1, 7, 8, 31, 64)] == [4, 4, 2, 2, 0]
    with pytest.raises(ValueError):
        DraftSchedule({0: 3})


def test_auto_takes_the_k_of_most_tokens_per_second():
    # a memory-bound small batch and a compute-bound large one
    def ms(bucket, k):
        return 1.0 + 0.01 * k if bucket == 1 else 1.0 + 1.5 * k

    auto = AutoDraftLength(draft_lens=(0, 1, 2, 3, 5), step_ms=ms, prior=0.8)
    assert auto.choose([R(0)], 1) == 5  # nearly free drafts: the longest chain
    assert auto.choose([R(i) for i in range(64)], 64) == 0  # expensive drafts at 0.8: plain decoding
    low = AutoDraftLength(draft_lens=(0, 1, 3), step_ms=ms, prior=0.8)
    for _ in range(20):
        low.observe([R(7)], [0], 3)  # request 7 never accepts
    assert low.acceptance(R(7)) < 0.2 and low.acceptance(R(8)) < 0.8  # the pool learnt too
    low.forget(R(7))
    assert low.acceptance(R(7)) == low.acceptance(R(8))


def test_a_longer_draft_must_beat_a_shorter_one_by_the_margin():
    """At acceptance 0.9 one draft emits 1.9 tokens a step, two 2.71: with steps of 1.4 and 1.96 ms, two
    drafts promise 1.9% more tokens per second. The default margin (2%) keeps one; no margin takes two, and
    so does the default once two promise 4% more (a step of 1.92 ms)."""
    batch = [R(i) for i in range(4)]

    def auto(k2_ms, **kw):
        return AutoDraftLength(draft_lens=(1, 2), step_ms=lambda b, k: (1.4, k2_ms)[k - 1], prior=0.9, **kw)

    assert auto(1.96).choose(batch, 4) == 1
    assert auto(1.96, margin=0.0).choose(batch, 4) == 2
    assert auto(1.92).choose(batch, 4) == 2
    with pytest.raises(ValueError, match="margin"):
        AutoDraftLength(margin=-0.1)


def test_the_pool_remembers_steps_not_requests():
    """With decay 0.5, a step of 32 accepted drafts then a step of 32 rejected ones leave the pool at about
    16 accepted in 48 trials: the first step weighs half, however many requests each step held."""
    auto = AutoDraftLength(draft_lens=(0, 1), decay=0.5, step_ms=lambda bucket, k: 1.0)
    batch = [R(i) for i in range(32)]
    auto.observe(batch, [1] * 32, 1)
    auto.observe(batch, [0] * 32, 1)
    assert auto.pool.accepted == pytest.approx(16) and auto.pool.trials == pytest.approx(48)
    auto.observe(batch, [0] * 32, 0)  # plain decoding fades the pool once, not 32 times
    assert auto.pool.trials == pytest.approx(24)


def test_num_draft_tokens_forms():
    assert draft_policy(3) == ((3,), FixedDraftLength(3))
    lens, policy = draft_policy([2, 0, 4])
    assert lens == (2, 0, 4) and policy == FixedDraftLength(2)
    lens, policy = draft_policy({1: 4, 16: 1})
    assert lens == (1, 4) and isinstance(policy, DraftSchedule)
    lens, policy = draft_policy("auto")
    assert lens == (0, 1, 2, 3, 5) and isinstance(policy, AutoDraftLength)
    lens, _ = draft_policy(AutoDraftLength(draft_lens=(1, 2)))
    assert lens == (1, 2)
    for bad in ("fast", 2.5, [1, 1], {1: -1}):
        with pytest.raises((ValueError, TypeError)):
            draft_policy(bad)


def test_auto_without_step_times_says_so():
    with pytest.raises(RuntimeError, match="no step times"):
        AutoDraftLength().choose([R(0)], 1)


def test_plain_decoding_fades_a_requests_evidence_towards_the_pool():
    a = Acceptance(decay=0.5)
    for _ in range(4):
        a.observe(0, 2)  # rejected at once, four times
    low = a.estimate(0.6, weight=2.0)
    a.observe(0, 0)
    assert a.trials == pytest.approx(1.875 / 2) and low < a.estimate(0.6, weight=2.0) < 0.6


def test_an_unlucky_start_does_not_hold_plain_decoding_for_good():
    """K = 1 pays from acceptance 0.25 up (step times 1 and 1.25); the pool has learnt 0.6. A request whose
    first drafts are all rejected gets K = 0, and drafts again after some plain steps."""
    auto = AutoDraftLength(draft_lens=(0, 1), step_ms=lambda bucket, k: 1.0 + 0.25 * k)
    for i in range(100):
        auto.observe([R(1000 + i)], [1 if i % 5 < 3 else 0], 1)
    r = R(7)
    assert auto.choose([r], 1) == 1
    chosen = []
    for _ in range(60):
        k = auto.choose([r], 1)
        chosen.append(k)
        auto.observe([r], [0], k)  # every draft rejected while it drafts
    assert 0 in chosen and chosen[chosen.index(0) :].count(1) >= 1


@pytest.mark.parametrize("acceptance", [0.3, 0.6, 0.9])
@pytest.mark.parametrize("batch", [1, 16, 64])
def test_auto_keeps_up_with_the_best_fixed_k_on_a_simulated_twin(acceptance, batch):
    """Step times shaped like the 28-layer twin's on the H200 (each draft token about a third of a step at
    a batch of one, a step's worth at 64); over a few seeds, auto (learning from a cold start) stays within
    5% of the best fixed K in hindsight."""

    def step_ms(bucket, k):
        return (5.0 + bucket / 8) * (1 + k * (0.3 + 0.7 * bucket / 64))

    def mean_tps(make):
        return sum(
            simulate(make(), acceptance, batch, 128, step_ms, buckets=(1, 4, 16, 64), seed=seed)[0] for seed in range(4)
        )

    best = max(mean_tps(lambda k=k: FixedDraftLength(k)) for k in (0, 1, 2, 3, 5))
    auto = mean_tps(lambda: AutoDraftLength(draft_lens=(0, 1, 2, 3, 5), step_ms=step_ms))
    assert auto >= 0.95 * best


def test_drafts_past_a_requests_length_limit_count_for_nothing():
    class Req:
        def __init__(self, rid, max_new_tokens, made):
            self.id, self.max_new_tokens, self.output = rid, max_new_tokens, [0] * made

    auto = AutoDraftLength(draft_lens=(0, 1, 3, 5), step_ms=lambda bucket, k: 1.0 + 0.1 * k, prior=0.95)
    assert auto.choose([Req(0, 100, 10)], 1) == 5  # far from its limit: the longest chain pays
    assert auto.choose([Req(0, 100, 98)], 1) == 1  # two tokens left: one draft and the bonus
    assert auto.choose([Req(0, 100, 99)], 1) == 0  # the last token: plain decoding
