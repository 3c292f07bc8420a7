"""A captured key's instantiation (its executable graph and fused launch) happens with its capture, and a
failure there fails the key like a failed capture, on every rank (on the simulated backend; the real graphs
in tests/gpu/test_gpu_fused_copy.py)."""

import pytest
import torch

from stepgraph.errors import CaptureError
from tests.helpers import SimulatedBackend
from tests.unit.test_runner import batch, expected, make


def test_every_key_captured_is_instantiated_once_before_its_first_run():
    be = SimulatedBackend()
    r, _ = make(be)
    assert sorted(r.capture()) == sorted(r.keys) and be.instantiated == [8, 4, 2, 1]
    x = batch(3)
    assert torch.equal(r.run(x)["out"], expected(x))
    assert torch.equal(r.run(batch_size=2)["out"], expected(x)[:2])  # steady: the inputs still in place
    assert be.instantiated == [8, 4, 2, 1] and "instantiate_ms" in r.info()["keys"]["bs=4/greedy"]


@pytest.mark.parametrize("together", [True, False], ids=["capture-many", "first-use"])
def test_an_instantiation_that_raises_fails_its_key_which_runs_eagerly(together):
    be = SimulatedBackend()
    be.fail_instantiate = RuntimeError("CUDA error: out of memory")
    r, _ = make(be)
    if together:
        assert r.capture([(1, "greedy"), (2, "greedy")]) == []
    x = batch(2)
    assert torch.equal(r.run(x)["out"], expected(x))
    s = r.stats(r.key_for(2))
    assert (s.status, s.cause, s.replays, s.eager_runs) == ("failed", "out_of_memory", 0, 1)
    assert "out of memory" in s.error
    assert be.discarded == (2 if together else 1) and r.info()["capture_failures"] == be.discarded


def test_under_raise_a_failed_instantiation_raises_naming_its_key():
    be = SimulatedBackend()
    be.fail_instantiate = RuntimeError("bad graph")
    r, _ = make(be, on_capture_error="raise")
    with pytest.raises(CaptureError, match="bs=4/greedy.*bad graph"):
        r.capture([(1, "greedy"), (4, "greedy")])
    assert r.stats(r.key_for(4)).status == "failed" and be.discarded == 1


def test_a_failed_instantiation_here_fails_the_key_on_every_rank():
    be = SimulatedBackend()
    be.fail_instantiate = RuntimeError("bad graph")
    r, _ = make(be)
    votes = []
    r.agree = lambda vote: votes.append(vote) or vote
    x = batch(1)
    assert torch.equal(r.run(x)["out"], expected(x))
    assert votes == [2, 0] and be.discarded == 1 and r.stats(r.key_for(1)).cause == "step_error"
