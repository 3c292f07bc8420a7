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
    copy) and whose graphs draw from torch's generators when ``draws``."""
    offsets, replays = [0], []

    class Backend(SimulatedBackend):
        def capture(self, fn, children=()):
            c = super().capture(fn, children)
            inner = c.graph.replay

            def replay():  # a graph that draws numbers advances the generator's offset when replayed
                inner()
                replays.append(1)
                offsets[0] += 4 if draws else 0

            c.graph.replay = replay
            return c

    monkeypatch.setattr(capture, "_generator_offsets", lambda: list(offsets))
    r, _ = make(Backend())
    made, plain_commit = [], r.buffers.commit

    def fuse(graph):
        made.append(FakeFused(graph))
        return made[-1]

    def commit(padded, then=None):
        plain_commit(padded)
        if then is not None:
            then.graph.replay()  # the copy, then the key's graph: one launch
        return then is not None

    monkeypatch.setattr(r.buffers, "fuse", fuse)
    monkeypatch.setattr(r.buffers, "commit", commit)
    return r, made, replays


def test_a_graph_that_draws_no_numbers_is_fused_once_when_its_key_is_first_replayed(monkeypatch):
    r, made, replays = fusing_runner(monkeypatch, draws=False)
    xs = [batch(3, seed) for seed in range(4)]
    outs = [r.run(x)["out"].clone() for x in xs]  # the first captures and replays apart, then fuses
    assert all(torch.equal(o, expected(x)) for o, x in zip(outs, xs, strict=True))
    captured = r.stats(r.key_for(3)).captured
    assert captured.draws_rng is False and len(made) == 1 and captured.fused is made[0]
    assert torch.equal(r.run(batch_size=3)["out"], expected(xs[-1]))  # steady: replayed apart
    assert r.stats(r.key_for(3)).replays == len(replays) == 5  # a fused run is not replayed a second time


def test_a_graph_that_draws_numbers_is_never_fused(monkeypatch):
    r, made, _ = fusing_runner(monkeypatch, draws=True)
    for seed in range(3):
        x = batch(2, seed)
        assert torch.equal(r.run(x)["out"], expected(x))
    captured = r.stats(r.key_for(2)).captured
    assert captured.draws_rng is True and captured.fused is False and made == []


def test_discarding_a_captured_key_closes_its_fused_launch():
    fused = FakeFused(None)
    c = capture.Captured(graph=None, outputs={}, seconds=0.0, pool_bytes=0, fused=fused)
    capture.CudaGraphBackend.discard(c)  # a staticmethod: no backend (and no GPU) needed
    assert fused.closed and c.fused is None
