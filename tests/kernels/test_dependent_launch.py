"""Programmatic dependent launch: which kernels launch so, that each waits for the kernel before first, that
it is off where it cannot run, and that its piece turns it off."""

import ast
import importlib
import inspect
import pkgutil
import textwrap

import torch
from triton.runtime.jit import KernelInterface

import stepgraph.kernels
from stepgraph import RunnerConfig, SamplingParams, Toggles
from stepgraph.kernels._common import dependent_launch

#: The sampled verify's kernels, each launched as a dependent of the kernel before it.
DEPENDENT = {
    "_sampling_filter._stats_kernel", "_sampling_mass._temperature_kernel", "_sampling_mass._round_kernel",
    "_sampling_mass._kept_mass_kernel", "_sampling_pivot._stats_kernel", "_sampling_topk._stats_kernel",
    "_sampling_topk._bound_kernel", "_sampling_topk._gather_kernel", "_sampling_topk._cut_kernel",
    "chain_sampling._finalize_kernel",
}  # fmt: skip


def _kernels_with_a_wait():
    """``{module.kernel: its body's statements after the docstring}`` for every Triton kernel of
    :mod:`stepgraph.kernels` that takes ``GDC``."""
    found = {}
    for info in pkgutil.iter_modules(stepgraph.kernels.__path__):
        module = importlib.import_module(f"stepgraph.kernels.{info.name}")
        for name, fn in vars(module).items():
            kernel = isinstance(fn, KernelInterface) and "GDC" in getattr(fn, "arg_names", ())
            if kernel and fn.fn.__module__ == module.__name__:
                body = ast.parse(textwrap.dedent(inspect.getsource(fn.fn))).body[0].body
                found[f"{info.name}.{name}"] = body[1:] if isinstance(body[0], ast.Expr) else body
    return found


def test_every_dependent_kernel_waits_for_the_one_before_first():
    """A dependent launch's programs may be placed while the kernel before it runs: each one's first
    statement is the wait (``if GDC: after_previous()``), before it reads anything that kernel writes."""
    found = _kernels_with_a_wait()
    assert set(found) == DEPENDENT
    for name, body in found.items():
        assert ast.unparse(body[0]) == "if GDC:\n    after_previous()", name


def test_launches_keep_plain_stream_order_off_the_gpu_and_when_asked():
    for on in (True, False):
        assert dependent_launch(torch.zeros(3), on) == {"GDC": False, "launch_pdl": False}


def test_the_piece_turns_dependent_launches_off(monkeypatch):
    """``STEPGRAPH_DEPENDENT_LAUNCH=0`` reaches every call of the sampling kernel: the step's verify and the
    prefill's first token."""
    from stepgraph.examples.model import build
    from stepgraph.kernels import chain_sampling
    from stepgraph.speculative import chunk_forward, decoder, pieces

    seen = []
    original = chain_sampling.chain_verify_sampling

    def recording(*args, dependent=True, **kwargs):
        seen.append(dependent)
        return original(*args, dependent=dependent, **kwargs)

    for module in (pieces, chunk_forward):
        monkeypatch.setattr(module, "chain_verify_sampling", recording)
    target, draft = build("tiny", num_layers=1)
    for value, expected in (("0", False), ("1", True)):
        seen.clear()
        toggles = Toggles.from_env({"STEPGRAPH_DEPENDENT_LAUNCH": value})
        config = RunnerConfig(toggles=toggles, progress=False)
        dec = decoder.SpecDecoder.for_example(target, draft, max_batch=2, config=config)
        dec.generate([[5, 17, 3], [9, 2]], max_new_tokens=3, sampling=SamplingParams(temperature=0.8, seed=1))
        assert len(seen) >= 2 and set(seen) == {expected}, (value, seen)
