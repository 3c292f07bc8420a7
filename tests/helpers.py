"""Shared by the CPU tests: a simulated graph backend, scripted memory readings, and transformers' own
greedy decode to compare with."""

from __future__ import annotations

from stepgraph.capture import Captured, WarmupRun
from stepgraph.memory import MemoryReading


class ScriptedReader:
    """Returns the scripted readings in order (the last one repeats); counts cache releases."""

    def __init__(self, *readings: MemoryReading) -> None:
        self.readings = list(readings)
        self.releases = 0

    def read(self) -> MemoryReading:
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]

    def release_cache(self) -> None:
        self.releases += 1


def plenty(free=1 << 40) -> MemoryReading:
    return MemoryReading(free=free, total=free * 2, reserved=0, allocated=0)


class _Replayer:
    """Replays by re-running the step and writing into the captured (static) outputs."""

    def __init__(self, fn, outputs) -> None:
        self.fn, self.outputs = fn, outputs

    def replay(self) -> None:
        new = self.fn()
        for name, t in self.outputs.items():
            t.copy_(new[name])

    def reset(self) -> None:
        pass


class SimulatedBackend:
    """A CPU stand-in for CudaGraphBackend (a ``GraphBackend``): exercises the runner's bookkeeping
    without a GPU.

    ``fail`` makes every capture raise (e.g. a host sync); ``peak``/``pool_bytes`` are reported byte counts.
    ``instantiated`` records each instantiation's batch size; ``fail_instantiate`` makes it raise.
    """

    name = "simulated"

    def __init__(self, reader=None, *, peak=1 << 20, pool=1 << 20, fail: Exception | None = None) -> None:
        self.reader = reader or ScriptedReader(plenty())
        self.peak, self.pool_bytes, self.fail = peak, pool, fail
        self.stream = None  # work runs on the current (CPU) stream
        self.order: list[int] = []
        self.releases = 0
        self.discarded = 0
        self.draws_rng = False  # what the warm-up reports: whether the step drew from torch's generators
        self.fail_instantiate: Exception | None = None  # raised by every instantiation
        self.instantiated: list[int] = []

    def pool(self):
        return None

    def warmup(self, fn, iters: int) -> WarmupRun:
        for _ in range(iters):
            fn()
        return WarmupRun(self.peak, self.draws_rng)

    def capture(self, fn, children=()) -> Captured:
        if self.fail is not None:
            raise self.fail
        out = fn()
        self.order.append(next(iter(out.values())).shape[0])
        for child in children:
            child.hold()
        return Captured(_Replayer(fn, out), out, seconds=0.002, pool_bytes=self.pool_bytes, children=list(children))

    def instantiate(self, captured) -> None:
        self.instantiated.append(next(iter(captured.outputs.values())).shape[0])
        if self.fail_instantiate is not None:
            raise self.fail_instantiate

    def discard(self, captured) -> None:
        self.discarded += 1

    def release(self, captured) -> None:
        captured.clear()
        self.releases += 1


def hf_greedy(target, prompt: list[int], n: int, **kw) -> list[int]:
    """The new tokens of ``target.generate(do_sample=False)`` (a Hugging Face model) for one prompt."""
    import torch

    ids = torch.tensor([prompt], device=target.device)
    out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False, **kw)
    return out[0, len(prompt) :].tolist()
