"""A run's input copy carried by the step's own graph: a ticket in a mailbox, fetched by the graph's first
kernel (on the CPU the "graph" is the same kernels run through Triton's interpreter when it replays)."""

import pytest
import torch

from stepgraph import Buffer, RunnerConfig, StaticBuffers, StepGraphRunner, Toggles
from stepgraph.kernels import _staging_ring
from stepgraph.kernels.input_copy import STAGING_RING
from tests.helpers import SimulatedBackend
from tests.unit.test_buffers import as_bytes, inputs, specs


def fetching(padded_rows=6):
    a = StaticBuffers(specs(), "cpu", staged_copy=True, copy_in_graph=True)
    assert a.copy_in_graph
    return a, (lambda: a.graph_copy(padded_rows))


def test_tickets_copy_exactly_what_launches_copy_and_replays_without_one_copy_nothing():
    a, replay = fetching()
    p = StaticBuffers(specs(), "cpu", one_launch_copy=False)
    calls = STAGING_RING + 3  # the ring wraps
    for call in range(calls):
        n = 1 + call % 6
        x = inputs(n) if call % 3 == 0 else {"tokens": torch.arange(n) + call, "h16": torch.randn(n, 1).half()}
        a.stage(x)
        a.commit(6, replay)
        p.copy_in(x, n, 6)
        a.commit(6, replay)  # a steady replay: nothing posted, nothing copied
        for name in specs():
            assert torch.equal(as_bytes(a[name]), as_bytes(p[name])), (name, call)
    ring = a._copy.ring
    assert ring.tickets == calls and a._copy.launches == 0  # no copy had a launch of its own
    assert ring._mail[0] == 0  # every ticket fetched


def test_a_replay_that_raises_takes_its_ticket_back_and_the_next_run_is_right():
    a, replay = fetching()
    a.copy_in(inputs(4), 4, 6)
    before = {n: as_bytes(t).clone() for n, t in a.tensors.items()}

    def broken():
        raise RuntimeError("launch refused")

    a.stage({"tokens": torch.arange(3) + 40})
    with pytest.raises(RuntimeError, match="refused"):
        a.commit(6, broken)
    assert a._copy.ring._mail[0] == 0
    replay()  # a later replay finds no ticket: the failed run's copy never lands
    assert all(torch.equal(as_bytes(t), before[n]) for n, t in a.tensors.items())
    a.stage({"tokens": torch.arange(2) + 70})
    a.commit(6, replay)
    assert a["tokens"][:2].tolist() == [70, 71] and (a["tokens"][2:6] == -1).all()


def test_a_ticket_never_fetched_stops_the_next_post_with_a_clear_error(monkeypatch):
    """A graph that has not started yet holds its ticket: the host waits, and after the timeout says why
    instead of overwriting it. Once that graph runs, its ticket is fetched and posting works again."""
    monkeypatch.setattr(_staging_ring, "TICKET_TIMEOUT_S", 0.05)
    a, replay = fetching()
    a.stage({"tokens": torch.arange(2) + 5})
    a.commit(6, lambda: None)  # launched, but (here: never) started
    a.stage({"tokens": torch.arange(2) + 9})
    with pytest.raises(RuntimeError, match="STEPGRAPH_COPY_IN_GRAPH=0"):
        a.commit(6, replay)
    replay()  # the first graph finally runs: it copies its own run's inputs
    assert a["tokens"][:2].tolist() == [5, 6]
    a.stage({"tokens": torch.arange(2) + 9})
    a.commit(6, replay)
    assert a["tokens"][:2].tolist() == [9, 10]


def test_graph_copy_needs_the_kernel_and_rows_inside_the_buffers():
    off = StaticBuffers(specs(), "cpu", one_launch_copy=False, copy_in_graph=True)
    assert not off.copy_in_graph
    with pytest.raises(ValueError, match="one-launch copy kernel"):
        off.graph_copy(4)
    a, _ = fetching()
    with pytest.raises(ValueError, match="rows must be in 1..8"):
        a.graph_copy(9)


@pytest.mark.parametrize("in_graph", [True, False])
def test_a_runner_whose_graphs_fetch_their_copies_matches_eager_runs(in_graph):
    """Through the runner: captured keys take their runs' copies as tickets; an oversize batch (no graph)
    still launches its copy; every output equals an eager runner's."""

    def step(buf, bs, sampling):
        return {"out": buf["x"] * 2 + buf["y"][:, None].float(), "y": buf["y"] + 1}

    def runner(backend, toggles):
        bufs = {"x": Buffer((6, 3), torch.float32, pad=0.0), "y": Buffer((6,), torch.int64, pad=-1)}
        buffers = StaticBuffers(bufs, "cpu", staged_copy=True, copy_in_graph=True)
        config = RunnerConfig(toggles=toggles, progress=False, buckets=(2, 4))
        return StepGraphRunner(step, buffers, config=config, backend=backend)

    graphs = runner(SimulatedBackend(), Toggles().with_piece("copy_in_graph", in_graph))
    eager = runner(None, Toggles(step_graph=False))
    g = torch.Generator().manual_seed(0)
    for n in (3, 1, 4, 2, 3, 5, 4):
        x = {"x": torch.randn(n, 3, generator=g), "y": torch.randint(0, 50, (n,), generator=g)}
        e, o = eager.run(x), graphs.run(x)
        assert torch.equal(o["out"], e["out"]) and torch.equal(o["y"], e["y"]), n
        e, o = eager.run(batch_size=n), graphs.run(batch_size=n)  # steady state: inputs in place
        assert torch.equal(o["out"], e["out"]) and torch.equal(o["y"], e["y"]), n
    ring = graphs.buffers._copy.ring
    assert (ring.tickets, graphs.buffers._copy.launches) == ((6, 1) if in_graph else (0, 7))
    assert ring._mail[0] == 0
