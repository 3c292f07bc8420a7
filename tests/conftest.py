"""Test setup: Triton's interpreter on CPU-only machines, GPU tests skipped without CUDA."""

import os

import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    # Must happen before triton is imported: @triton.jit decides at decoration time.
    os.environ.setdefault("TRITON_INTERPRET", "1")

import logging  # noqa: E402

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    skip_multi = pytest.mark.skip(reason="needs 2+ CUDA devices")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)
        if "multi_gpu" in item.keywords and (not HAS_CUDA or torch.cuda.device_count() < 2):
            item.add_marker(skip_multi)


@pytest.fixture(autouse=True)
def _seed_and_env(monkeypatch):
    torch.manual_seed(0)
    # Tests choose their toggles explicitly; a developer's shell must not leak in.
    for name in list(os.environ):
        if name.startswith("STEPGRAPH_"):
            monkeypatch.delenv(name, raising=False)
    logging.getLogger("stepgraph").setLevel(logging.INFO)
    yield
    if HAS_CUDA:
        torch.cuda.synchronize()


@pytest.fixture
def device():
    return torch.device("cuda" if HAS_CUDA else "cpu")
