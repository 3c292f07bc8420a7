"""Splicing per-stage graphs into the step graph, on the GPU."""

import pytest
import torch

from stepgraph import RunnerConfig, SamplingParams, Toggles
from stepgraph.errors import ReleasedError
from stepgraph.examples.model import build
from stepgraph.speculative.decoder import SpecDecoder
from stepgraph.splice import SpliceError, StageGraph, splice, support

pytestmark = pytest.mark.gpu


def decoder(splice_stages, toggles=None, dtype=torch.float32, seed=0):
    target, draft = build("tiny", device="cuda", dtype=dtype)
    cfg = RunnerConfig(toggles=toggles or Toggles.all(True), progress=False)
    return SpecDecoder.for_example(target, draft, max_batch=4, config=cfg, seed=seed, splice_stages=splice_stages)


def prompts():
    g = torch.Generator().manual_seed(3)
    return [torch.randint(0, 512, (int(n),), generator=g).tolist() for n in (5, 9, 4, 11, 7)]


def test_supported_here():
    assert support() == (True, "")


def test_spliced_step_equals_directly_captured_step():
    spliced = decoder(True)
    direct = decoder(False)
    a = spliced.generate(prompts(), max_new_tokens=24)
    b = direct.generate(prompts(), max_new_tokens=24)
    assert a == b
    info = spliced.info()
    key = info["keys"][info["captured_keys"][0]]
    assert [c["name"].split()[0] for c in key["children"]] == ["draft", "verify", "extend"]
    assert key["pool_bytes"] >= sum(c["pool_bytes"] for c in key["children"])
    assert info["graph_pool_bytes"] >= key["pool_bytes"]


def test_spliced_sampling_draws_fresh_numbers_and_reproduces():
    sp = SamplingParams(temperature=1.0, top_k=50)
    a = decoder(True, seed=1).generate(prompts(), max_new_tokens=16, sampling=sp)
    b = decoder(True, seed=1).generate(prompts(), max_new_tokens=16, sampling=sp)
    c = decoder(True, seed=2).generate(prompts(), max_new_tokens=16, sampling=sp)
    assert a == b and a != c


def test_stage_drawing_from_torch_generator_is_refused():
    with pytest.raises(SpliceError, match="draws random numbers"):
        StageGraph(lambda: torch.rand(8, device="cuda"), name="noisy")


def test_the_torch_sampling_path_splices_too_and_draws_the_kernels_tokens():
    """The sampling references draw from each request's Philox stream (not torch's generator), so their
    stages splice, draw fresh numbers on every launch, and give the kernels' tokens."""
    sp = SamplingParams(temperature=1.0, seed=3)
    refs = decoder(True, Toggles.all(True).with_piece("two_launch_sampling", False))
    out = refs.generate(prompts()[:2], max_new_tokens=8, sampling=sp)
    assert not [k for k in refs.info()["keys"].values() if k["status"] == "failed"]
    assert out == decoder(True).generate(prompts()[:2], max_new_tokens=8, sampling=sp)


def test_stage_held_by_live_parent_cannot_be_released():
    dec = decoder(True)
    dec.generate(prompts()[:1], max_new_tokens=8)
    key = dec.runner.key_for(1, "greedy", dec.step.K)
    stage = dec.step.stage_graphs(key)["draft"]
    assert stage.parents == 1
    with pytest.raises(ReleasedError, match="live parent"):
        stage.release()
    dec.step.release()  # parents first, then the stages
    assert stage.released and stage.parents == 0


def test_splice_outside_capture_replays():
    x = torch.zeros(4, device="cuda")
    stage = StageGraph(lambda: x.add_(1), name="inc")  # primed once at capture
    before = x.clone()
    splice(stage)
    assert torch.equal(x, before + 1)
