"""A run with new inputs launches its copy and its key's graph together (one fused executable graph) when
the graph draws nothing from torch's generators; every other run keeps the two launches."""

import gc

import pytest
import torch

from stepgraph import Buffer, RunnerConfig, StepGraphRunner, Toggles

pytestmark = pytest.mark.gpu

SPECS = {
    "tokens": Buffer((8,), torch.int64, pad=-1),
    "hidden": Buffer((8, 64), torch.bfloat16, pad=0.0),
    "scale": Buffer((8,), torch.float32, pad=1.0),
}


def plain_step(buf, bs, sampling):
    return {"t": buf["tokens"] * 3, "h": buf["hidden"].float().sum(-1) * buf["scale"]}


def make(step=plain_step, buckets=(2, 4, 8)):
    config = RunnerConfig(toggles=Toggles(), buckets=buckets, progress=False)
    return StepGraphRunner(step, SPECS, device="cuda", config=config)


def inputs(i: int, b: int, where: str) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(i)
    t = {
        "tokens": torch.randint(0, 1000, (b,), generator=g),
        "hidden": torch.randn(b, 64, generator=g).to(torch.bfloat16),
        "scale": torch.rand(b, generator=g),
    }
    return {k: v.to(where) for k, v in t.items()}


def expected(x: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    x = {k: torch.tensor(v).cuda() if isinstance(v, list) else v.cuda() for k, v in x.items()}
    return x["tokens"] * 3, x["hidden"].float().sum(-1) * x["scale"]


def in_step(ring) -> bool:
    """The device's count of copies fetched equals the host's count of copies launched."""
    torch.cuda.synchronize()
    return ring.copies_fetched() == ring.turn


@pytest.mark.parametrize("together", [True, False], ids=["captured-together", "on-first-use"])
def test_fused_runs_equal_their_inputs_across_keys_steady_runs_and_eager_sizes(together):
    """Runs with new inputs (host, device and lists), steady runs and oversize eager runs interleaved: every output
    is its own inputs', the fused launch is used for captured keys, and the device's count of copies
    stays equal to the host's, whether the keys were captured together or on first use."""
    r = make(buckets=(2, 4))  # batches of 5..8 are larger than every bucket: eager, the copy on its own
    if together:
        assert len(r.capture()) == 2 and all(r.info()["keys"][str(k)]["instantiate_ms"] > 0 for k in r.keys)
    ring_plan = r.buffers.copy_plan
    outs = []
    for i in range(40):
        b = 1 + i % 8
        x = inputs(i, b, "cuda" if i % 3 else "cpu")
        if i % 4 == 1:
            x["tokens"] = x["tokens"].tolist()  # a list: packed straight into the pinned ring
        got = r.run(x)
        outs.append(({k: v.clone() for k, v in got.items()}, expected(x)))
        if i % 5 == 0:
            again = r.run(batch_size=b)  # steady: the inputs are still in place
            outs.append(({k: v.clone() for k, v in again.items()}, expected(x)))
    torch.cuda.synchronize()
    for got, (t, h) in outs:
        assert torch.equal(got["t"], t) and torch.equal(got["h"], h)
    for key in r.keys:
        captured = r.stats(key).captured
        assert captured is not None and captured.draws_rng is False and captured.fused
    assert r.counters.oversize_runs > 0
    assert in_step(ring_plan.ring)


def test_a_collection_inside_the_rings_capture_destroys_no_old_graph(monkeypatch):
    """The staging ring is captured on a runner's first run with new inputs. A collection inside that capture
    (here forced, as any allocation can start one) must find the dropped runners' graphs already gone:
    destroying one while a stream captures would fail the capture and the run."""
    from stepgraph.copy_in import ring

    kernel, collected = ring.copy_in_kernel, []

    class Collecting:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                if torch.cuda.is_current_stream_capturing():
                    gc.collect()
                    collected.append(grid)
                return kernel[grid](*args, **kwargs)

            return launch

    for i in range(3):
        old = make()
        old.run(inputs(i, 2, "cpu"))  # its ring and a key captured
        old.cycle = old  # only the collector can free it now
        del old
    monkeypatch.setattr(ring, "copy_in_kernel", Collecting())
    new = make()
    x = inputs(7, 3, "cpu")
    got = new.run(x)
    assert collected, "the ring was not captured by this run"
    t, h = expected(x)
    assert torch.equal(got["t"], t) and torch.equal(got["h"], h)


def test_fused_replay_equals_the_two_launch_replay_bit_for_bit():
    """The same inputs through a fused launch and through the copy and a replay apart give the same bits."""
    r = make()
    x = inputs(7, 3, "cpu")
    fused = r.run(x, copy_outputs=True)  # captured on first use, with its fused launch
    captured = r.stats(r.key_for(3)).captured
    launch, captured.fused = captured.fused, False  # the copy, then a replay
    apart = r.run(x, copy_outputs=True)
    captured.fused = launch
    assert launch and r.stats(r.key_for(3)).replays == 2
    for k in apart:
        assert torch.equal(apart[k], fused[k])


def test_a_step_drawing_random_numbers_keeps_two_launches_and_fresh_numbers():
    """A graph that draws from torch's generator needs ``replay()``'s generator prologue: it is never fused,
    and every run draws new numbers."""

    def noisy(buf, bs, sampling):
        return {"t": buf["tokens"].float() + torch.rand(bs, device="cuda")}

    r = make(noisy)
    x = {"tokens": torch.zeros(3, dtype=torch.int64)}
    draws = [r.run(x)["t"].clone() for _ in range(4)]
    captured = r.stats(r.key_for(3)).captured
    assert captured.draws_rng is True and captured.fused is False
    assert len({tuple(d.tolist()) for d in draws[1:]}) == 3  # fresh numbers on every replay


def test_a_refused_input_and_release_leave_the_copy_count_in_step():
    """A run refused after its copy was staged, and a release (which closes the fused launches) followed by
    new captures: later runs still copy their own inputs."""
    r = make()
    ring_plan = r.buffers.copy_plan
    r.run(inputs(0, 3, "cpu"))
    r.run(inputs(1, 3, "cpu"))
    with pytest.raises(ValueError):
        r.run({**inputs(2, 3, "cpu"), "scale": torch.rand(4)})  # staged, then refused: batch sizes disagree
    fused = r.stats(r.key_for(3)).captured.fused
    assert fused
    r.release()
    assert fused.handle == 0  # closed with its key's graph
    for i in range(3, 9):
        x = inputs(i, 1 + i % 4, "cpu")
        t, h = expected(x)
        got = r.run(x)
        assert torch.equal(got["t"], t) and torch.equal(got["h"], h)
    assert in_step(ring_plan.ring)


@pytest.mark.parametrize("one_launch", [True, False], ids=["one-launch", "per-tensor"])
def test_a_pinned_host_input_changed_after_run_returns_never_reaches_the_step(one_launch):
    """Both copy paths read a host source before run() returns (the toggle is for bisecting, and must not
    change what a run reads): a caller may reuse its pinned tensor at once, with the device busy."""
    config = RunnerConfig(toggles=Toggles().with_piece("one_launch_copy", one_launch), buckets=(4,), progress=False)
    r = StepGraphRunner(plain_step, SPECS, device="cuda", config=config)
    busy = torch.randn(4096, 4096, device="cuda")
    outs, wants = [], []
    for i in range(20):
        x = {k: v.pin_memory() for k, v in inputs(i, 3, "cpu").items()}
        want = expected(x)
        for _ in range(4):
            busy = busy @ busy / 64  # the device is behind the host when run() returns
        outs.append(r.run(x, copy_outputs=True)["t"])
        x["tokens"].add_(7)  # reused by the caller right away
        wants.append(want[0])
    torch.cuda.synchronize()
    assert all(torch.equal(o, w) for o, w in zip(outs, wants, strict=True))
