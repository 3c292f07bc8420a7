"""Nothing is left half-done: an exception inside generate() gives every slot and cache row back, and
two threads sharing a runner never mix their results."""

import threading

import pytest
import torch

from stepgraph import Buffer, RunnerConfig, StepGraphRunner, Toggles
from stepgraph.examples.model import build, greedy_reference
from stepgraph.speculative.decoder import SpecDecoder


class Flaky:
    """Wraps a model; its ``fail_at``-th call raises (``None``: never). Attributes pass through."""

    def __init__(self, model, fail_at=None):
        self.model, self.fail_at, self.calls = model, fail_at, 0

    def __call__(self, *args):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError(f"injected failure at call {self.calls}")
        return self.model(*args)

    def __getattr__(self, name):
        return getattr(self.model, name)


PROMPTS = [[3, 9, 27], [5, 1], [7, 7, 7, 7], [11], [2, 4, 6, 8, 10]]
LENGTHS = [6, 11, 3, 9, 7]


def decoder(target, draft, **kw):
    cfg = RunnerConfig(toggles=Toggles.all(True), progress=False)
    return SpecDecoder.for_example(target, draft, config=cfg, max_batch=3, num_draft_tokens=2, **kw)


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlap"])
@pytest.mark.parametrize("fail_at", [1, 6, 11])  # a prefill, a step, the last step (11 calls in all)
@pytest.mark.parametrize("who", ["target", "draft"])
def test_a_model_that_raises_leaves_the_decoder_serving(who, fail_at, overlap):
    target, draft = build("tiny")
    flaky = Flaky(target if who == "target" else draft, fail_at)
    dec = decoder(flaky, draft) if who == "target" else decoder(target, flaky)
    with pytest.raises(RuntimeError, match="injected failure"):
        dec.generate(PROMPTS, max_new_tokens=LENGTHS, overlap=overlap)
    assert dec.in_use == (0, 0)
    for slot in range(dec.step.relay.num_slots):  # every slot back at its pad values
        for name, f in dec.step.relay.fields.items():
            assert torch.equal(f[slot], torch.full_like(f[slot], dec.step.relay.pads[name])), (slot, name)
    out = dec.generate(PROMPTS, max_new_tokens=LENGTHS, overlap=overlap)
    assert out == [greedy_reference(target, p, m) for p, m in zip(PROMPTS, LENGTHS)]
    assert dec.in_use == (0, 0)


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlap"])
def test_a_callback_that_raises_leaves_the_decoder_serving(overlap):
    target, draft = build("tiny")
    dec = decoder(target, draft)

    def on_step(batch_size):
        if on_step.calls == 3:
            raise KeyboardInterrupt  # not only Exception: an interrupt frees everything too
        on_step.calls += 1

    on_step.calls = 0
    with pytest.raises(KeyboardInterrupt):
        dec.generate(PROMPTS, max_new_tokens=LENGTHS, overlap=overlap, on_step=on_step)
    assert dec.in_use == (0, 0)
    assert dec.generate(PROMPTS[:2], max_new_tokens=5) == [greedy_reference(target, p, 5) for p in PROMPTS[:2]]


def test_bad_request_in_a_batch_takes_nothing():
    target, draft = build("tiny")
    dec = decoder(target, draft)
    with pytest.raises(ValueError, match="prompt token ids"):
        dec.generate([[1, 2], [3, 10_000]], max_new_tokens=4)
    assert dec.in_use == (0, 0)


def _runner():
    # a step slow enough on the CPU that two threads' calls would interleave without the lock
    def step(buf, bs, sampling):
        y = buf["x"]
        for _ in range(20):
            y = y * 1.0001 + 0.0
        return {"y": y.sum(-1)}

    return StepGraphRunner(
        step,
        {"x": Buffer((4, 4096), torch.float64)},
        device="cpu",
        config=RunnerConfig(toggles=Toggles(), buckets=(1, 2, 4), progress=False),
    )


def test_two_threads_sharing_a_runner_get_their_own_results():
    runner = _runner()
    errors, wrong = [], []

    def worker(value: float, rows: int):
        x = torch.full((rows, 4096), value, dtype=torch.float64)
        want = runner.run({"x": x}, copy_outputs=True)["y"]
        try:
            for _ in range(60):
                got = runner.run({"x": x}, copy_outputs=True)["y"]
                if not torch.equal(got, want):
                    wrong.append(value)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(v, r)) for v, r in ((1.0, 2), (2.0, 3), (3.0, 1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and not wrong
    assert runner.info()["runs"] == 3 * 61


def test_views_read_after_another_threads_run_are_refused():
    from stepgraph import StaleOutputError

    runner = _runner()
    out = runner.run({"x": torch.ones(2, 4096, dtype=torch.float64)})
    t = threading.Thread(target=lambda: runner.run({"x": torch.zeros(1, 4096, dtype=torch.float64)}))
    t.start()
    t.join()
    with pytest.raises(StaleOutputError):
        out["y"]
