"""The runner's per-key host hook (before_replay), and keys by draft length and penalised."""

import pytest
import torch

from stepgraph import Buffer, GraphKey, RunnerConfig, Sampling, StepGraphRunner, Toggles
from tests.helpers import SimulatedBackend


class RecordingPlanner:
    """What a host-planned backend would keep per key (one FlashInfer wrapper per batch size): it records
    every plan it is asked for."""

    made: list = []

    def __init__(self, key: GraphKey) -> None:
        self.key, self.plans = key, []
        RecordingPlanner.made.append(self)

    def __call__(self, batch_size: int) -> None:
        self.plans.append(batch_size)


def runner(backend=None, **kw):
    def step(buf, bs, sampling, *rest, penalised=False):  # y = 2x + K (+ 100 where penalised)
        return {"y": buf["x"] * 2 + (rest[0] if rest else 0) + (100 if penalised else 0)}

    cfg = RunnerConfig(toggles=Toggles(), buckets=(1, 2, 4), progress=False)
    return StepGraphRunner(step, {"x": Buffer((8,), torch.float32)}, device="cpu", config=cfg, backend=backend, **kw)


def test_each_key_gets_its_own_hook_called_before_every_run_and_its_capture():
    RecordingPlanner.made.clear()
    r = runner(SimulatedBackend(), before_replay=RecordingPlanner)
    for n in (3, 3, 1, 4):
        r.run({"x": torch.ones(n)})
    r.run(None, batch_size=3)
    planners = {p.key: p for p in RecordingPlanner.made}
    assert set(planners) == {GraphKey(4, Sampling.GREEDY), GraphKey(1, Sampling.GREEDY)}  # made once per key
    bs4 = planners[GraphKey(4, Sampling.GREEDY)]
    # the capture plans for the padded batch before its warm-up run and before the capture itself, then
    # every run plans for its real batch (replays and the steady state alike)
    assert bs4.plans == [4, 4, 3, 3, 4, 3]
    assert r.stats(GraphKey(4, Sampling.GREEDY)).hook is bs4


def test_the_hook_runs_on_eager_and_oversize_runs_too():
    RecordingPlanner.made.clear()
    r = runner(before_replay=RecordingPlanner)  # no backend on the CPU: every run is eager
    r.run({"x": torch.ones(3)})
    r.run({"x": torch.ones(6)})  # past the largest bucket: eager at its own size, a key of its own
    r.run({"x": torch.ones(7)})
    assert {p.key.batch_size: p.plans for p in RecordingPlanner.made} == {4: [3], 6: [6], 7: [7]}
    assert r.info()["oversize_runs"] == 2


def test_a_factory_may_give_a_key_no_hook():
    r = runner(SimulatedBackend(), before_replay=lambda key: None)
    assert torch.equal(r.run({"x": torch.ones(2)})["y"], torch.full((2,), 2.0))


def test_draft_lengths_are_keys_of_their_own():
    r = runner(SimulatedBackend(), draft_lens=(3, 0, 5))
    assert torch.equal(r.run({"x": torch.ones(2)})["y"], torch.full((2,), 5.0))  # the first: 3
    assert torch.equal(r.run({"x": torch.ones(2)}, draft_len=0)["y"], torch.full((2,), 2.0))
    assert torch.equal(r.run(None, batch_size=2, draft_len=5)["y"], torch.full((2,), 7.0))
    assert r.info()["captured_keys"] == ["bs=2/greedy/k=0", "bs=2/greedy/k=3", "bs=2/greedy/k=5"]
    assert r.key_for(2, "greedy") == GraphKey(2, Sampling.GREEDY, 3)
    with pytest.raises(ValueError, match="not one of the step's draft lengths"):
        r.run({"x": torch.ones(2)}, draft_len=4)
    report = r.warmup(2)
    assert report.captured_keys == [f"bs={b}/greedy/k={k}" for b in (1, 2) for k in (0, 3, 5)]


def test_a_runner_without_draft_lengths_refuses_one():
    r = runner()
    with pytest.raises(ValueError, match="has no draft lengths"):
        r.run({"x": torch.ones(2)}, draft_len=3)


def test_penalised_keys_are_keys_of_their_own_called_penalised():
    RecordingPlanner.made.clear()
    r = runner(SimulatedBackend(), draft_lens=(3, 0), penalised_keys=True, before_replay=RecordingPlanner)
    for _ in range(2):  # the second time round from the routes the first one kept
        assert torch.equal(r.run({"x": torch.ones(2)})["y"], torch.full((2,), 5.0))
        assert torch.equal(r.run({"x": torch.ones(2)}, penalised=True)["y"], torch.full((2,), 105.0))
        assert torch.equal(r.run(None, batch_size=2, draft_len=0, penalised=True)["y"], torch.full((2,), 102.0))
    assert r.info()["captured_keys"] == ["bs=2/greedy/k=0/penalised", "bs=2/greedy/k=3", "bs=2/greedy/k=3/penalised"]
    assert {p.key for p in RecordingPlanner.made} == {
        GraphKey(2, Sampling.GREEDY, 3), GraphKey(2, Sampling.GREEDY, 3, True), GraphKey(2, Sampling.GREEDY, 0, True)
    }  # fmt: skip
    assert r.key_for(2, "greedy", penalised=True) == GraphKey(2, Sampling.GREEDY, 3, True)
    assert r.time_key(GraphKey(4, Sampling.GREEDY, 0, True)) > 0
    assert r.stats(GraphKey(4, Sampling.GREEDY, 0, True)).captured is not None
    report = r.warmup(2)
    variants = [(k, p) for k in (0, 3) for p in ("", "/penalised")]
    assert report.captured_keys == [f"bs={b}/greedy/k={k}{p}" for b in (1, 2) for k, p in variants]
    r.release()
    assert set(r.capture()) == {
        GraphKey(b, Sampling.GREEDY, k, p) for b in (1, 2, 4) for k in (0, 3) for p in (False, True)
    }


def test_a_runner_without_penalised_keys_refuses_them():
    r = runner(SimulatedBackend())
    with pytest.raises(ValueError, match="no penalised keys"):
        r.run({"x": torch.ones(2)}, penalised=True)
    with pytest.raises(ValueError, match="no penalised keys"):
        r.capture([GraphKey(2, Sampling.GREEDY, None, True)])
    assert r.warmup(2).captured_keys == ["bs=1/greedy", "bs=2/greedy"]


@pytest.mark.parametrize("bad", [(), (1, 1), (-1,), (2.5,), (True,)])
def test_bad_draft_lengths_are_refused(bad):
    with pytest.raises((ValueError, TypeError), match="draft"):
        runner(draft_lens=bad)
