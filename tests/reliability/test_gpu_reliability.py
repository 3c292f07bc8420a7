"""Reliability on the GPU: capture faults, memory pressure, and a 100,000-replay soak."""

import gc
import logging
import random
import time

import pytest
import torch

from stepgraph import Buffer, RunnerConfig, StepGraphRunner, Toggles
from stepgraph.keys import GraphKey
from stepgraph.memory import MemoryGuard, ReleaseBudget, TorchMemoryReader
from stepgraph.sampling import Sampling

pytestmark = pytest.mark.gpu
MiB = 1 << 20
D = 256


class Step:
    """Two GEMMs; optional faults: raise, host sync, or a huge allocation only while capturing."""

    def __init__(self, fault: str | None = None):
        g = torch.Generator(device="cuda").manual_seed(0)
        self.w1 = torch.randn(D, 2 * D, device="cuda", generator=g) / D**0.5
        self.w2 = torch.randn(2 * D, D, device="cuda", generator=g) / D**0.5
        self.fault = fault

    def __call__(self, buf, bs, sampling):
        capturing = torch.cuda.is_current_stream_capturing()
        if self.fault == "raise" and capturing:
            raise RuntimeError("user step failed during capture")
        h = torch.relu(buf["x"] @ self.w1)
        if self.fault == "sync":
            h = h * (h.sum() > 0).item()
        if self.fault == "oom" and capturing:  # beyond the process memory fraction (0.5 of the card)
            torch.empty(int(torch.cuda.get_device_properties(0).total_memory * 0.6), dtype=torch.uint8, device="cuda")
        return {"y": (h @ self.w2) * (1 + int(sampling))}


def runner(step, **cfg):
    cfg.setdefault("buckets", (1, 2, 4, 8))
    cfg.setdefault("toggles", Toggles())
    return StepGraphRunner(
        step, {"x": Buffer((12, D), torch.float32)}, device="cuda", config=RunnerConfig(progress=False, **cfg)
    )


def settle() -> int:
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return torch.cuda.memory_reserved()


@pytest.mark.parametrize("fault,cause", [("raise", "step_error"), ("sync", "host_sync"), ("oom", "out_of_memory")])
def test_capture_fault_twenty_times_serves_eagerly_without_growth(caplog, fault, cause):
    if fault == "oom":
        torch.cuda.set_per_process_memory_fraction(0.5)
    try:
        r = runner(Step(fault))
        x = torch.randn(3, D, device="cuda")
        ref = runner(Step(None), toggles=Toggles(step_graph=False)).run({"x": x}, copy_outputs=True)["y"]
        with caplog.at_level(logging.WARNING, logger="stepgraph"):
            out = r.run({"x": x}, copy_outputs=True)["y"]
            base = settle()
            for _ in range(19):
                r.capture([(4, "greedy")])
            grown = settle() - base
        st = r.stats(GraphKey(4, Sampling.GREEDY))
        assert st.status == "failed" and st.cause == cause, st.error
        assert "INTERNAL ASSERT" not in st.error, st.error  # the 20th failure is the step's, not the allocator's
        assert st.failures == 20 and r.info()["capture_failures"] == 20
        assert len([m for m in caplog.messages if "capture of key" in m]) == 1
        assert grown <= 0, f"memory_reserved grew by {grown / MiB:.1f} MiB over 19 failed captures"
        if fault != "sync":
            assert torch.allclose(out, ref)  # the eager fallback serves the right answer
        assert torch.equal(r.run({"x": x}, copy_outputs=True)["y"], out)  # still serving, same bits
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)


def test_a_failed_first_capture_leaves_the_pool_usable_for_the_next_key():
    """The first capture on the runner's pool fails; the next key must still capture and replay right."""

    class FailsAtFour(Step):
        def __call__(self, buf, bs, sampling):
            if bs == 4 and torch.cuda.is_current_stream_capturing():
                torch.empty(1 << 20, device="cuda")  # a block in the pool before the failure
                raise RuntimeError("user step failed during capture")
            return super().__call__(buf, bs, sampling)

    r = runner(FailsAtFour())
    r.capture([(4, "greedy"), (2, "greedy")])
    assert r.stats(GraphKey(4, Sampling.GREEDY)).status == "failed"
    assert r.stats(GraphKey(2, Sampling.GREEDY)).status == "captured", r.stats(GraphKey(2, Sampling.GREEDY)).error
    x = torch.randn(2, D, device="cuda")
    eager = runner(Step(), toggles=Toggles(step_graph=False)).run({"x": x}, copy_outputs=True)["y"]
    assert torch.equal(r.run({"x": x}, copy_outputs=True)["y"], eager)
    torch.randn(3, D, device="cuda")  # torch's generator is out of capture mode after the failure
    r.release()


@pytest.mark.parametrize("models", ["example", "hf"])
def test_first_use_captures_survive_decoders_dropped_before_them(models):
    """Decoders are reference cycles (step <-> runner): dropped ones wait for the collector, whose run in
    the middle of a later capture would destroy their graphs there and fail it. Collections are made
    frequent here; every capture on first use (no warm-up) must still succeed."""
    from stepgraph.examples.model import build
    from stepgraph.speculative.decoder import SpecDecoder

    config = RunnerConfig(toggles=Toggles.all(True), progress=False)
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    if models == "hf":
        pytest.importorskip("transformers")
        from stepgraph.adapters.hf import hf_spec_decoder
        from tests.e2e.test_hf_adapter import llama

        def make():
            target, draft = llama(64, 2, 4, 2, seed=0).to("cuda"), llama(32, 1, 2, 1, seed=1).to("cuda")
            return hf_spec_decoder(target, draft, max_requests=4, max_seq_len=64, config=config)
    else:

        def make():
            target, draft = build("tiny", device="cuda", dtype=torch.float32, max_requests=4)
            return SpecDecoder.for_example(target, draft, config=config)

    thresholds = gc.get_threshold()
    gc.set_threshold(50, 2, 2)  # a full collection every few hundred allocations
    try:
        outputs = []
        for _ in range(5):
            dec = make()
            outputs.append(dec.generate(prompts, max_new_tokens=12))  # batch sizes 3, 2, 1: keys on first use
            info = dec.info()
            assert info["capture_failures"] == 0, info["keys"]
            assert len(info["captured_keys"]) >= 2
            del dec  # unreachable, not yet collected
    finally:
        gc.set_threshold(*thresholds)
    assert all(o == outputs[0] for o in outputs)


def test_a_collection_inside_a_first_use_capture_destroys_no_old_graph():
    """The deterministic form of the test above: the step itself runs the collector while it is being
    captured (as an allocation can). Dropped runners holding graphs must have been collected before."""

    class Collecting(Step):
        def __call__(self, buf, bs, sampling):
            if torch.cuda.is_current_stream_capturing():
                gc.collect()
            return super().__call__(buf, bs, sampling)

    def make(step):
        cfg = RunnerConfig(toggles=Toggles.all(True), buckets=(1, 2, 4), progress=False)
        return StepGraphRunner(step, {"x": Buffer((4, D), torch.float32)}, device="cuda", config=cfg)

    x = torch.randn(3, D, device="cuda")
    for _ in range(3):
        old = make(Step())
        old.run({"x": x})  # captured on first use
        assert old.info()["captured_keys"] == ["bs=4/greedy"]
        old.cycle = old  # only the collector can free it now
        del old
    new = make(Collecting())
    out = new.run({"x": x}, copy_outputs=True)["y"]  # captured on first use, collecting inside
    info = new.info()
    assert info["capture_failures"] == 0 and info["captured_keys"] == ["bs=4/greedy"], info["keys"]
    assert torch.equal(new.run({"x": x})["y"], out)


def test_refusals_logged_once_per_key_with_four_figures(caplog):
    r = runner(Step(), memory_margin_bytes=1 << 50)
    with caplog.at_level(logging.WARNING, logger="stepgraph"):
        for bs in (1, 2, 2, 3, 5, 8, 8):
            r.run({"x": torch.randn(bs, D, device="cuda")})
    msgs = [m for m in caplog.messages if "not capturing key" in m]
    assert len(msgs) == 4  # keys bs=1, 2, 4, 8: once each
    for m in msgs:
        for figure in ("free", "needed", "reserved", "allocated"):
            assert figure in m
    info = r.info()
    assert info["memory_refusals"] == 4 and info["captured_keys"] == []
    assert info["last_memory_refusal"]["key"] == "bs=8/greedy"


def test_cache_releases_stop_at_32_with_real_readings():
    budget = ReleaseBudget()
    guard = MemoryGuard(TorchMemoryReader(), 0, budget=budget)
    needed = 64 * MiB
    allowed = 0
    for i in range(40):
        t = torch.empty(512 * MiB, dtype=torch.uint8, device="cuda")
        del t  # 512 MiB now cached by PyTorch, not free on the device
        free = torch.cuda.mem_get_info()[0]
        guard.margin = free - needed + 256 * MiB  # fits only after the cache is released
        allowed += guard.check(f"key{i}", needed).allowed
    # the cap: releases stop at 32; the 8 checks after that cannot release, so they are refused
    assert guard.cache_releases == 32 and budget.remaining == 0
    assert guard.refusals >= 8 and allowed <= 32


def test_soak_100k_replays_mixed_keys_refusals_and_oversize():
    """Random batch size and sampling class per step; bs=4 keys refused; 9..12 oversize (eager)."""

    class RefuseFour(MemoryGuard):
        def check(self, key, needed):
            if key.startswith("bs=4/"):
                self.margin = 1 << 50
            d = super().check(key, needed)
            self.margin = 0
            return d

    step = Step()
    r = StepGraphRunner(
        step,
        {"x": Buffer((12, D), torch.float32)},
        device="cuda",
        config=RunnerConfig(toggles=Toggles(), buckets=(1, 2, 4, 8), progress=False, refused_retry_runs=10**9),
        guard=RefuseFour(TorchMemoryReader(), 0, budget=ReleaseBudget(0)),
    )
    eager = StepGraphRunner(
        step,
        {"x": Buffer((12, D), torch.float32)},
        device="cuda",
        config=RunnerConfig(toggles=Toggles(step_graph=False), buckets=(1, 2, 4, 8), progress=False),
    )
    r.capture([(b, s) for b in (1, 2, 4, 8) for s in Sampling])
    xs = torch.randn(12, 12, D, device="cuda")
    rng = random.Random(0)
    for bs in range(1, 13):  # settle every shape's allocations (both runners) before the baseline
        for s in Sampling:
            r.run({"x": xs[0, :bs]}, s)
            eager.run({"x": xs[0, :bs]}, s)
    start = (settle(), torch.cuda.memory_allocated())
    t0 = time.perf_counter()
    checked = 0

    def one(i: int) -> int:  # a function, so no tensor of the last step outlives it
        bs = rng.randint(1, 12)
        s = Sampling(rng.randint(0, len(Sampling) - 1))
        out = r.run({"x": xs[i % 12, :bs]}, s)
        if i % 997 == 0:
            got = out["y"].clone()
            ref = eager.run({"x": xs[i % 12, :bs]}, s)["y"]
            assert torch.equal(got, ref), (i, bs, s)
            return 1
        return 0

    for i in range(100_000):
        checked += one(i)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    end = (settle(), torch.cuda.memory_allocated())
    info = r.info()
    print(
        f"soak: 100000 runs in {seconds:.1f} s; replays {info['replays']}, eager {info['eager_runs']} "
        f"(oversize {info['oversize_runs']}); reserved {start[0] / MiB:.1f} -> {end[0] / MiB:.1f} MiB, "
        f"allocated {start[1] / MiB:.1f} -> {end[1] / MiB:.1f} MiB; {checked} eager re-runs compared"
    )
    assert end[0] <= start[0] and end[1] <= start[1]
    assert info["oversize_runs"] > 0 and info["memory_refusals"] == len(Sampling) and info["replays"] > 50_000
