"""compile=True on the GPU: inductor's kernels captured into the step graph, bit-exact within the setting."""

from dataclasses import replace

import pytest
import torch

from stepgraph import RunnerConfig, Toggles
from stepgraph.compile import CompiledForward
from stepgraph.examples.model import build, greedy_reference
from stepgraph.speculative.decoder import SpecDecoder

pytestmark = pytest.mark.gpu

PROMPTS = [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8, 9, 7, 9], [2, 7, 1, 8, 2, 8]]


def decode(models, toggles, *, compile=True, max_batch=4):
    target, draft = models
    cfg = RunnerConfig(toggles=toggles, progress=False)
    dec = SpecDecoder.for_example(target, draft, max_batch=max_batch, config=cfg, compile=compile)
    return dec, dec.generate(PROMPTS, max_new_tokens=[20, 12, 16, 9])


@pytest.mark.parametrize("attention,matmul", [("sdpa", "torch"), ("triton", "torch"), ("triton", "triton")])
def test_compiled_step_graph_equals_compiled_eager_step(attention, matmul):
    models = build("tiny", device="cuda", dtype=torch.bfloat16, attention=attention, matmul=matmul)
    dec, out = decode(models, Toggles.all(True))
    _, eager = decode(models, replace(Toggles.all(True), step_graph=False))
    assert out == eager
    info = dec.info()
    assert info["replays"] > 0 and info["captured_keys"]
    assert info["compile"]["target"]["compiles"] >= 1 and info["compile"]["target"]["failures"] == 0
    assert info["compile"]["draft"]["failures"] == 0
    assert any(k["compile_s"] > 0 for k in info["keys"].values())  # compiled in a key's warm-up


@pytest.mark.parametrize("matmul", ["torch", "triton"])
def test_compiled_greedy_agrees_with_the_targets_own_greedy_in_fp32(matmul):
    models = build("tiny", device="cuda", dtype=torch.float32, attention="triton", matmul=matmul)
    dec, out = decode(models, Toggles.all(True))
    ref = [greedy_reference(models[0], p, len(o)) for p, o in zip(PROMPTS, out)]
    same = sum(a == b for o, r in zip(out, ref) for a, b in zip(o, r)) / sum(len(o) for o in out)
    print(f"agreement with the target's greedy decoding: {same:.3f}")
    assert same >= 0.9
    assert dec.info()["replays"] > 0


def test_compile_off_by_the_toggle_runs_the_forwards_as_written():
    models = build("tiny", device="cuda", dtype=torch.bfloat16)
    dec, out = decode(models, Toggles.all(True).with_piece("compile_forwards", False))
    _, plain = decode(models, Toggles.all(True), compile=False)
    assert out == plain and "compile" not in dec.info()


def test_a_new_signature_inside_a_capture_is_refused_not_compiled():
    torch._dynamo.reset()  # the tests before compiled this model: the one compile below is then this forward's
    target, _ = build("tiny", device="cuda", dtype=torch.bfloat16)
    fwd = CompiledForward(target, name="target")
    args = lambda b: (  # noqa: E731
        torch.zeros(b, 2, dtype=torch.long, device="cuda"),
        torch.zeros(b, 2, dtype=torch.long, device="cuda"),
        torch.zeros(b, dtype=torch.long, device="cuda"),
    )
    fwd(*args(1))  # compiled outside a capture
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        g = torch.cuda.CUDAGraph()
        a1, a3 = args(1), args(3)
        with torch.cuda.graph(g, stream=s):
            fwd(*a1)  # compiled signature: captured
            with pytest.raises(RuntimeError, match="inside a CUDA graph capture"):
                fwd(*a3)
    g.replay()
    torch.cuda.synchronize()
    assert fwd.compiles == 1
