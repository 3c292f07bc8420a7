"""compile=True on the CPU: compiled forwards in the decoder, one variant for every key, compile time per key,
a failing compile falling back, the toggle, and bad arguments. (Capture with compile: tests/gpu.)"""

import logging

import pytest
import torch
from rich.console import Console

from stepgraph import RunnerConfig, StepGraphRunner, Toggles
from stepgraph.buffers import Buffer
from stepgraph.compile import CompiledForward, backend_name
from stepgraph.examples.model import build, greedy_reference
from stepgraph.report import print_report
from stepgraph.speculative.decoder import SpecDecoder
from tests.helpers import SimulatedBackend

PROMPTS = [[5, 6, 7], [8, 9, 10, 11, 12], [1, 2, 3, 4]]
COMPILE_ONLY = Toggles.all(False).with_piece("compile_forwards", True)  # torch pieces: no interpreter needed


@pytest.fixture(autouse=True)
def fresh_dynamo():  # each test counts its own compiles: none reused from the one before
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def decoder(compile, toggles=COMPILE_ONLY, layers=1):
    target, draft = build("tiny", num_layers=layers)
    cfg = RunnerConfig(toggles=toggles, progress=False)
    return SpecDecoder.for_example(target, draft, max_batch=4, config=cfg, compile=compile), target


def test_compiled_decoder_equals_the_targets_greedy_and_compiles_per_batch_class():
    dec, target = decoder("aot_eager")
    lengths = [16, 4, 8]  # the batch shrinks to one request
    out = dec.generate(PROMPTS, max_new_tokens=lengths)
    assert out == [greedy_reference(target, p, n) for p, n in zip(PROMPTS, lengths)]
    info = dec.info()["compile"]
    # the target runs at T = K + 1, the draft at T = 1 and K + 1, at batches of 3, 2 and 1 (requests
    # finishing shrink the batch): batch and token dimensions are dynamic, sizes of one too
    assert info["target"]["compiles"] == 1 and info["draft"]["compiles"] == 1
    assert info["target"]["failures"] == info["draft"]["failures"] == 0
    assert info["target"]["seconds"] > 0
    dec.generate(PROMPTS[:2], max_new_tokens=6)  # another batch size: nothing new to compile
    assert dec.info()["compile"]["target"]["compiles"] == 1
    console = Console(record=True, width=200)
    print_report(dec.info(), console=console)
    assert "torch.compile target" in console.export_text()


def test_several_draft_lengths_share_the_compiled_variants():
    """The token dimension is dynamic too: K = 1, 2 and 4 (T = 2, 3, 5 in the verify and draft-extend
    forwards) need no more variants than one K does."""
    target, draft = build("tiny", num_layers=1)
    cfg = RunnerConfig(toggles=COMPILE_ONLY, progress=False)
    dec = SpecDecoder.for_example(
        target, draft, num_draft_tokens=(2, 1, 4), max_batch=4, config=cfg, compile="aot_eager"
    )
    out = dec.generate(PROMPTS, max_new_tokens=6)
    for k in (2, 1, 4):
        for batch in ([PROMPTS[0]], PROMPTS):
            reqs = dec.make_requests(batch, max_new_tokens=8)
            slots = dec.admit(reqs)
            dec.step.run(slots, dec.step.runner.config.default_sampling, draft_len=k)
            dec.finish(reqs)
    assert out == [greedy_reference(target, p, 6) for p in PROMPTS]
    info = dec.info()["compile"]
    assert info["target"]["compiles"] == 1 and info["draft"]["compiles"] == 1  # as for one draft length


def test_inductor_on_the_cpu_matches_the_uncompiled_target():
    """Real inductor kernels (C++ on the CPU): fp32 greedy output equals the uncompiled target's here."""
    dec, target = decoder(True)
    out = dec.generate(PROMPTS[:2], max_new_tokens=6)
    assert out == [greedy_reference(target, p, 6) for p in PROMPTS[:2]]
    assert dec.info()["compile"]["target"]["backend"] == "inductor"


def test_the_skinny_matmul_compiles_as_one_opaque_operator():
    """matmul="triton": the projections stay ``torch.ops.stepgraph.skinny_matmul`` calls in the compiled
    forwards (no recompile when the batch grows), and the output equals the target's greedy decoding."""
    target, draft = build("tiny", num_layers=1, matmul="triton")
    cfg = RunnerConfig(toggles=COMPILE_ONLY, progress=False)
    dec = SpecDecoder.for_example(target, draft, max_batch=4, config=cfg, compile="aot_eager")
    out = dec.generate(PROMPTS, max_new_tokens=[6, 3, 4])
    assert out == [greedy_reference(target, p, n) for p, n in zip(PROMPTS, [6, 3, 4])]
    info = dec.info()["compile"]
    assert info["target"]["compiles"] == 1 and info["target"]["failures"] == 0


@torch._dynamo.register_backend(name="stepgraph_test_broken")
def _broken_backend(gm, example_inputs):
    raise RuntimeError("this backend cannot compile anything")


def test_a_failing_compile_runs_the_forward_as_written_and_says_so_once(caplog):
    dec, target = decoder("stepgraph_test_broken")
    with caplog.at_level(logging.WARNING, logger="stepgraph"):
        out = dec.generate(PROMPTS, max_new_tokens=8)
    assert out == [greedy_reference(target, p, 8) for p in PROMPTS]
    info = dec.info()["compile"]["target"]
    assert info["compiles"] == 0 and info["failures"] >= 1 and "cannot compile anything" in info["error"]
    warnings = [r for r in caplog.records if "torch.compile failed" in r.getMessage() and "target" in r.getMessage()]
    assert len(warnings) == 1


def test_the_toggle_turns_compiling_off():
    dec, _ = decoder(True, toggles=Toggles.all(False))
    assert dec.step.compiled == {} and "compile" not in dec.info()
    assert not isinstance(dec.step.target, CompiledForward)


@pytest.mark.parametrize("bad", [1, "", 2.0])
def test_bad_compile_arguments_are_named(bad):
    for toggles in (COMPILE_ONLY, Toggles.all(False)):  # named even where the toggle turns compiling off
        with pytest.raises(ValueError, match="compile must be True, False or a torch.compile backend"):
            decoder(bad, toggles=toggles)
    assert backend_name(True) == "inductor" and backend_name(False) is None


def test_compile_time_is_counted_in_the_warm_up_of_the_key_that_compiled():
    fwd = CompiledForward(lambda x: x * 2 + 1, name="scale", backend="aot_eager")
    runner = StepGraphRunner(
        lambda buf, bs, sampling: {"y": fwd(buf["x"])},
        {"x": Buffer((8,), torch.float32)},
        device="cpu",
        config=RunnerConfig(toggles=Toggles(), buckets=(1, 4, 8), progress=False),
        backend=SimulatedBackend(),
    )
    report = runner.warmup(2, make_inputs=lambda k: {"x": torch.ones(k)})  # keys 1 and 4: one variant
    assert report.compile_seconds > 0 and report.as_dict()["compile_seconds"] > 0
    for n in (1, 3, 8):
        assert torch.equal(runner.run({"x": torch.ones(n)})["y"], torch.full((n,), 3.0))
    keys = runner.info()["keys"]
    compiled = sorted(name for name, k in keys.items() if k["compile_s"] > 0)
    assert len(compiled) == 1 and compiled[0] in ("bs=1/greedy", "bs=4/greedy"), keys
    assert fwd.compiles == 1  # a batch of one and of many share it


def test_the_masked_attention_is_sdpa_eagerly_and_one_opaque_operator_compiled():
    """The example model's masked attention: run eagerly it calls SDPA itself (a custom operator's dispatch
    would cost host time in every capture and import torch._dynamo); traced by torch.compile it is one call
    of ``stepgraph::masked_attention``, with the same values."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from stepgraph.examples.model import masked_attention

    class Calls(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func))
            return func(*args, **(kwargs or {}))

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, h, 3, 8, generator=g) for h in (4, 2, 2))
    mask = torch.arange(3)[None, None, None, :] <= torch.tensor([[0, 1, 2], [2, 2, 2]])[:, None, :, None]
    with Calls() as calls:
        eager = masked_attention(q, k, v, mask)
    assert calls.names and not any("stepgraph" in n for n in calls.names), calls.names
    assert eager.shape == (2, 3, 4, 8) and eager.is_contiguous()
    traced = []

    def backend(gm, example_inputs):
        traced.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    compiled = torch.compile(masked_attention, backend=backend, fullgraph=True)(q, k, v, mask)
    assert traced == ["stepgraph.masked_attention"], traced
    assert torch.equal(compiled, eager)
