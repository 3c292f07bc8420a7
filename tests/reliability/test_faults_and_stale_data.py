"""Capture faults (simulated backend on CPU), stale outputs, inputs at new addresses, padding leaks."""

import logging

import pytest
import torch

from stepgraph import Buffer, RunnerConfig, StaleOutputError, StepGraphRunner, Toggles
from stepgraph.examples.model import build, greedy_reference
from stepgraph.keys import GraphKey
from stepgraph.sampling import Sampling
from stepgraph.speculative.decoder import SpecDecoder
from tests.helpers import SimulatedBackend


class FailingStep:
    """Raises on the n-th call (warm-up or capture), then behaves."""

    def __init__(self, fail_on: set[int], exc: Exception) -> None:
        self.calls, self.fail_on, self.exc = 0, fail_on, exc

    def __call__(self, buf, bs, sampling):
        self.calls += 1
        if self.calls in self.fail_on:
            raise self.exc
        return {"y": buf["x"] * 3}


def make(step):
    return StepGraphRunner(
        step,
        {"x": Buffer((8,), torch.float32)},
        device="cpu",
        config=RunnerConfig(toggles=Toggles(), buckets=(2, 4, 8), progress=False),
        backend=SimulatedBackend(),
    )


@pytest.mark.parametrize(
    "fail_on,exc,cause",
    [
        ({1}, RuntimeError("boom in warm-up"), "step_error"),
        ({2}, RuntimeError("boom in capture"), "step_error"),
        ({2}, RuntimeError("CUDA error: operation not permitted when stream is capturing"), "host_sync"),
        ({2}, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "out_of_memory"),
    ],
)
def test_capture_fault_leaves_runner_serving(caplog, fail_on, exc, cause):
    r = make(FailingStep(fail_on, exc))
    with caplog.at_level(logging.WARNING, logger="stepgraph"):
        for _ in range(3):
            assert r.run({"x": torch.ones(3)})["y"].tolist() == [3.0] * 3
    st = r.stats(GraphKey(4, Sampling.GREEDY))
    assert st.status == "failed" and st.cause == cause and st.eager_runs == 3
    assert r.info()["capture_failures"] == 1
    assert len([m for m in caplog.messages if "capture of key" in m]) == 1


def test_twenty_failures_are_counted_and_logged_once(caplog):
    r = make(FailingStep(set(range(1, 1000)), RuntimeError("boom")))
    with caplog.at_level(logging.WARNING, logger="stepgraph"):
        for _ in range(20):
            r.capture([(2, "greedy")])
    assert r.info()["capture_failures"] == 20
    assert len([m for m in caplog.messages if "capture of key" in m]) == 1


def test_stale_outputs_error_and_copies_survive():
    r = make(FailingStep(set(), RuntimeError()))
    first = r.run({"x": torch.ones(2)})
    kept = first.clone()
    r.run({"x": torch.zeros(2)})
    with pytest.raises(StaleOutputError):
        first["y"]
    assert kept["y"].tolist() == [3.0, 3.0]


def test_inputs_at_new_addresses_are_copied_each_run():
    r = make(FailingStep(set(), RuntimeError()))
    for v in range(4):
        x = torch.full((2,), float(v))  # a new tensor (new address) every run
        assert r.run({"x": x})["y"].tolist() == [3.0 * v] * 2


def test_poisoned_padding_and_scratch_state_never_leak_into_real_rows():
    target, draft = build("tiny")
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12]]
    dec = SpecDecoder.for_example(target, draft, max_batch=4, config=RunnerConfig(toggles=Toggles.all(True)))
    relay = dec.step.relay
    scratch = relay.scratch_slot
    for name, f in relay.fields.items():  # garbage in the scratch slot and the gathered buffers
        if f.dtype.is_floating_point:
            f[scratch].fill_(float("nan"))
            relay.work[name].fill_(float("nan"))
    for cache in target.stack.kv_caches + draft.stack.kv_caches:  # and in the models' scratch cache row
        cache[target.cfg.scratch_row].fill_(float("nan"))
    out = dec.generate(prompts, max_new_tokens=12)  # batch of 2 pads to 2; as one finishes, 1
    assert out == [greedy_reference(target, p, 12) for p in prompts]
