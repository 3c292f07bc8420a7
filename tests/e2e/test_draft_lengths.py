"""A step with several draft lengths: K changes from one step to the next (K = 0 is plain decoding), and
greedy output stays the target's own greedy decoding."""

import itertools

import pytest

from stepgraph import RunnerConfig, SamplingParams, SpecDecoder, Toggles
from stepgraph.examples.model import build, greedy_reference
from stepgraph.speculative.draft_policy import AutoDraftLength, FixedDraftLength


def prompts():
    return [[5, 17, 99, 3, 8], [42, 7], [1, 2, 3, 4, 5, 6, 7, 8, 9]]


def decode_with_changing_k(dec, ks, new_tokens, sampling=SamplingParams()):
    """The decoder's own loop body (launch, read, apply) with the draft length taken from ``ks`` in turn."""
    requests = dec.make_requests(prompts(), max_new_tokens=new_tokens, sampling=sampling)
    for r in requests:
        dec.scheduler.admit(r)
    active, order = list(requests), itertools.cycle(ks)
    while active:
        batch = list(active)
        out = dec.scheduler.launch(batch, draft_len=next(order))
        for r in dec.scheduler.consume(batch, dec.read_tokens(out["tokens"])):
            active.remove(r)
            dec.slots.give_back(r)
    assert dec.in_use == (0, 0)
    return [r.output for r in requests]


@pytest.mark.parametrize("toggles", [Toggles.all(True), Toggles.all(False)], ids=["pieces-on", "pieces-off"])
def test_greedy_is_exact_whatever_draft_length_each_step_takes(toggles):
    target, draft = build("tiny")
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=(3, 0, 1, 5), config=RunnerConfig(toggles=toggles))
    out = decode_with_changing_k(dec, (3, 0, 1, 5, 0, 0, 1), new_tokens=20)
    assert out == [greedy_reference(target, p, 20) for p in prompts()]
    keys = dec.info()["keys"]
    assert {k.rsplit("/", 1)[1] for k in keys} == {"k=0", "k=1", "k=3", "k=5"}
    assert dec.info()["draft_lens"] == [3, 0, 1, 5]


def test_plain_decoding_alone_emits_one_token_per_step():
    target, draft = build("tiny")
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=0)
    out = dec.generate(prompts(), max_new_tokens=6)
    assert out == [greedy_reference(target, p, 6) for p in prompts()]
    assert dec.stats.mean_accept_len == 1.0


def test_sampled_decoding_with_changing_k_reproduces_under_a_seed(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # the references draw the kernels' numbers (tests/e2e/test_seeds.py)
    target, draft = build("tiny")
    sp = SamplingParams(temperature=0.9, top_k=20, seed=11)
    runs = []
    for _ in range(2):
        dec = SpecDecoder.for_example(target, draft, num_draft_tokens=(2, 0, 4))
        runs.append(decode_with_changing_k(dec, (2, 0, 4), new_tokens=10, sampling=sp))
    assert runs[0] == runs[1] and all(len(o) == 10 for o in runs[0])


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlap"])
def test_auto_is_exact_and_shows_its_choices(overlap, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # the kernels' references: the timings are of eager steps
    target, draft = build("tiny", draft="twin:0.7")
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens="auto", max_batch=3)
    dec.warmup()  # every bucket x K timed (eager steps on a CPU)
    out = dec.generate(prompts(), max_new_tokens=16, overlap=overlap)
    assert out == [greedy_reference(target, p, 16) for p in prompts()]
    info = dec.info()
    chosen = info["generation"]["draft_len_steps"]
    assert sum(chosen.values()) == dec.stats.steps and set(chosen) <= {"0", "1", "2", "3", "5"}
    assert info["draft_policy"] == "AutoDraftLength" and "bs=3/k=5" in info["step_ms"]


def test_a_schedule_follows_the_batch():
    target, draft = build("tiny", draft="twin:0.9")
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens={1: 4, 3: 1}, max_batch=3)
    out = dec.generate(prompts(), max_new_tokens=10)
    assert out == [greedy_reference(target, p, 10) for p in prompts()]
    assert set(dec.stats.as_dict()["draft_len_steps"]) <= {"1", "4"} and dec.stats.draft_len_steps[1] > 0


class Recording:
    """A policy that records, with the decoder's launches, the order of the scheduler's calls (``choose``
    with each request's output length then, ``observe``, ``forget``); it alternates K = 1, 2."""

    draft_lens = (1, 2)

    def __init__(self, requests):
        self.requests, self.events, self.k = requests, [], 2

    def launched(self, batch_size):
        self.events.append(("L", tuple(len(r.output) for r in self.requests)))

    def choose(self, batch, bucket):
        self.k = 3 - self.k
        self.events.append(("C", tuple(len(r.output) for r in self.requests)))
        return self.k

    def observe(self, batch, accepted, draft_len):
        self.events.append(("O", None))

    def forget(self, request):
        self.events.append(("F", request.id))


def test_the_sync_loop_learns_and_chooses_while_a_step_runs():
    target, draft = build("tiny", draft="twin:0.7")
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=(1, 2), max_batch=3)
    limits = [24, 30, 27]
    requests = dec.make_requests(prompts(), max_new_tokens=limits, sampling=SamplingParams())
    policy = dec.policy = Recording(requests)
    dec.serve(requests, on_step=policy.launched)
    assert [r.output for r in requests] == [greedy_reference(target, p, n) for p, n in zip(prompts(), limits)]
    kinds = "".join(e[0] for e in policy.events if e[0] != "F")
    launches = kinds.split("L")[1:]  # what happened after each launch, up to the next
    assert len(launches) == dec.stats.steps and kinds.count("O") == dec.stats.steps  # every step taught it
    assert "O" not in launches[0] and all(after.count("O") == 1 for after in launches[1:-1])  # a step late
    assert launches[-1].count("O") == 2  # the step before the last, and the last after the loop
    ahead = 0
    for i, (kind, at_launch) in enumerate(policy.events):
        if kind != "L":
            continue
        chosen = next(e for e in reversed(policy.events[:i]) if e[0] == "C")[1]
        if chosen != at_launch:  # chosen before the last step's tokens came: while it ran
            ahead += 1
            # taken only where those tokens cannot change it: every running request wants more than K = 2
            assert all(limit - n > 2 for limit, n in zip(limits, at_launch) if n < limit)
    assert ahead > 0
    assert sorted(e[1] for e in policy.events if e[0] == "F") == [0, 1, 2]  # every finished request forgotten


def test_auto_forgets_every_finished_request_in_both_loops():
    target, draft = build("tiny", draft="twin:0.7")
    for overlap in (False, True):
        # step times given: measured on a busy CPU they can make K = 0 win every step, which learns nothing
        auto = AutoDraftLength(step_ms=lambda bucket, k: 1.0 + 0.1 * k)
        dec = SpecDecoder.for_example(target, draft, num_draft_tokens=auto, max_batch=3)
        dec.generate(prompts(), max_new_tokens=12, overlap=overlap)
        assert dec.policy._requests == {} and dec.policy.pool.trials > 0


def test_an_instant_policy_is_asked_at_launch_only():
    class Counting(FixedDraftLength):
        calls = 0

        def choose(self, batch, bucket):
            Counting.calls += 1
            return super().choose(batch, bucket)

    target, draft = build("tiny", draft="twin:0.7")
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=2, max_batch=3)
    dec.policy = Counting(2)
    assert dec.generate(prompts(), max_new_tokens=12) == [greedy_reference(target, p, 12) for p in prompts()]
    assert Counting.calls == dec.stats.steps  # one question a step: none ahead of it
