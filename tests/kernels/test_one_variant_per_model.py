"""Kernels compile per model, not per key: an integer argument that follows the batch size, the draft length
or a round number is left unspecialized, so the keys of a warm-up share their compiled variants.

Triton compiles a variant for each distinct set of constexprs and, for every specialized integer argument,
for its class: equal to 1, a multiple of 16, or neither. The launches are recorded in the interpreter and
classed the same way."""

import importlib
import inspect
import pkgutil

import pytest
import torch
from triton.runtime.interpreter import InterpretedFunction

import stepgraph.kernels as kernels_pkg
from stepgraph.kernels._common import BATCH_SHAPED_ARGS
from stepgraph.kernels.chain_sampling import chain_verify_sampling
from stepgraph.kernels.greedy_verify import greedy_chain_verify

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="records the interpreter's launches")
TILES = ("BLOCK", "K1_P2", "NS_P2")  # tile sizes picked by the row count: a variant per value is expected
SPLIT_SIZE = ("SPLIT",)  # a constexpr of the greedy argmax pass only (its loop is faster with it known)


def _without_tiles(variants: set, also: tuple = ()) -> set:
    return {tuple(v for v in variant if v[0] not in TILES + also) for variant in variants}


def _int_class(value: int) -> str:
    return "1" if value == 1 else "D" if value % 16 == 0 else "-"


@pytest.fixture
def launches(monkeypatch):
    """``{kernel name: {variant}}`` of every launch in the test, a variant as Triton would key it."""
    seen: dict[str, set] = {}
    run = InterpretedFunction.run

    def recording(self, *args, grid, warmup, **kwargs):
        params = inspect.signature(self.fn).parameters
        bound = dict(zip(params, args)) | {k: v for k, v in kwargs.items() if k in params}
        unspecialized = set(self.kwargs.get("do_not_specialize") or ())
        variant = []
        for name, value in bound.items():
            if "constexpr" in str(params[name].annotation):
                variant.append((name, value))
            elif isinstance(value, int) and not isinstance(value, bool) and name not in unspecialized:
                variant.append((name, _int_class(value)))
        seen.setdefault(self.fn.__name__, set()).add(tuple(variant))
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)

    monkeypatch.setattr(InterpretedFunction, "run", recording)
    return seen


def test_batch_shaped_arguments_are_unspecialized_in_every_kernel():
    checked = 0
    for info in pkgutil.iter_modules(kernels_pkg.__path__):
        module = importlib.import_module(f"{kernels_pkg.__name__}.{info.name}")
        for kernel in vars(module).values():
            if not isinstance(kernel, InterpretedFunction) or not kernel.__name__.endswith("_kernel"):
                continue
            unspecialized = set(kernel.kwargs.get("do_not_specialize") or ())
            for name, p in inspect.signature(kernel.fn).parameters.items():
                if name in BATCH_SHAPED_ARGS and "constexpr" not in str(p.annotation):
                    assert name in unspecialized, f"{module.__name__}.{kernel.__name__}: {name} is specialized"
                    checked += 1
    assert checked >= 30


def test_greedy_verify_compiles_per_tile_and_split_size_not_per_batch_or_draft_length(launches):
    g = torch.Generator().manual_seed(0)
    for K in (1, 3):  # rows and draft strides of 1, of multiples of 16 and of neither
        for B in (1, 2, 4, 8):
            logits = torch.randn(B, K + 1, 2048, generator=g).to(torch.bfloat16)
            greedy_chain_verify(logits, torch.randint(0, 2048, (B, K), generator=g))
    assert len(_without_tiles(launches["_argmax_partial_kernel"], SPLIT_SIZE)) == 1
    assert len(_without_tiles(launches["_greedy_verify_finalize_kernel"])) == 1


@pytest.mark.slow  # six sampled verifies in the interpreter: half a minute
def test_sampled_verify_compiles_its_passes_once_for_every_batch(launches):
    g = torch.Generator().manual_seed(1)
    for small_top_k in (False, True):
        launches.clear()
        for B in (1, 4, 5):  # 4, 16 and 20 rows; the rounds count from 0
            logits = torch.randn(B, 4, 2048, generator=g).to(torch.bfloat16)
            drafts = torch.randint(0, 2048, (B, 3), generator=g)
            ones = torch.ones(B)
            chain_verify_sampling(
                logits, drafts, ones * 0.8, torch.full((B,), 20), ones * 0.9, torch.arange(B),
                torch.zeros(B, dtype=torch.int64), min_p=ones * 0.05, small_top_k=small_top_k,
            )  # fmt: skip
        assert len(launches) >= 3, sorted(launches)
        for name, variants in launches.items():
            fixed = _without_tiles(variants)
            assert len(fixed) == 1, f"{name}: {len(fixed)} variants besides its tile sizes: {sorted(fixed)}"
