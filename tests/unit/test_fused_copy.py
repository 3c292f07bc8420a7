"""The runner's fast path with a fused copy (the input copy and the key's graph in one launch), with the
launch simulated: which graphs are fused, that a fused run does not replay again, that release closes it.
The real launch is tested on the GPU (tests/gpu/test_gpu_fused_copy.py)."""

import torch

from stepgraph import capture
from tests.helpers import SimulatedBackend
from tests.unit.test_runner import batch, expected, make


class FakeFused:
    def __init__(self, graph):
        self.graph, self.closed = graph, False

    def close(self):
        self.closed = True


def fusing_runner(monkeypatch, draws: bool):
    """A runner on the simulated backend whose plan 'fuses' (the fused launch replays the graph after the
    copy) and whose step draws from torch's generators in its warm-up when ``draws``."""
    backend, replays = SimulatedBackend(), []
    backend.draws_rng = draws
    r, _ = make(backend)
    made, plain_commit = [], r.buffers.commit

    def fuse(graph):
        made.append(FakeFused(graph))
        return made[-1]

    def commit(padded, then=None):
        plain_commit(padded)
        if then is not None:
            then.graph.replay()  # the copy, then the key's graph: one launch
        return then is not None

    def replay(captured):
        replays.append(1)
        captured.graph.replay()

    monkeypatch.setattr(r.buffers, "fuser", lambda: fuse)
    monkeypatch.setattr(r.buffers, "commit", commit)
    monkeypatch.setattr(capture.Captured, "replay", replay)
    return r, made, replays


def test_a_graph_whose_step_draws_no_numbers_is_fused_when_captured(monkeypatch):
    r, made, replays = fusing_runner(monkeypatch, draws=False)
    xs = [batch(3, seed) for seed in range(4)]
    outs = [r.run(x)["out"].clone() for x in xs]  # the first captures (and fuses), every one launches fused
    assert all(torch.equal(o, expected(x)) for o, x in zip(outs, xs, strict=True))
    captured = r.stats(r.key_for(3)).captured
    assert captured.draws_rng is False and len(made) == 1 and captured.fused is made[0]
    assert torch.equal(r.run(batch_size=3)["out"], expected(xs[-1]))  # steady: replayed apart
    assert r.stats(r.key_for(3)).replays == 5 and len(replays) == 1  # a fused run is not replayed a second time


def test_a_graph_whose_step_draws_numbers_is_never_fused(monkeypatch):
    r, made, replays = fusing_runner(monkeypatch, draws=True)
    for seed in range(3):
        x = batch(2, seed)
        assert torch.equal(r.run(x)["out"], expected(x))
    captured = r.stats(r.key_for(2)).captured
    assert captured.draws_rng is True and captured.fused is False and made == [] and len(replays) == 3


def test_discarding_a_captured_key_closes_its_fused_launch():
    fused = FakeFused(None)
    c = capture.Captured(graph=None, outputs={}, seconds=0.0, pool_bytes=0, fused=fused)
    capture.CudaGraphBackend.discard(c)  # a staticmethod: no backend (and no GPU) needed
    assert fused.closed and c.fused is None
