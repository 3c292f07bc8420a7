"""Every Triton kernel variant a decode launches compiles for a GPU (sm_90), here, without one.

The interpreter runs a kernel as Python, and Python accepts what Triton's compiler refuses: a loop
variable that changes type between iterations passed every CPU test and failed to compile on the GPU.
So a decode through every kind of kernel records each launch's argument types and constexprs in the
interpreter, and Triton's compiler then builds each of those variants for the H200's architecture.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HELPER = Path(__file__).with_name("gpu_compile_check.py")
ROOT = HELPER.parents[2]

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU suite compiles them for real")


def _run(mode: str, path: Path, interpret: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": interpret, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(HELPER), mode, str(path)], env=env, capture_output=True, text=True, timeout=600
    )


def test_every_launched_variant_compiles_for_sm90(tmp_path):
    pytest.importorskip("triton.backends.nvidia.compiler")
    recorded = tmp_path / "launches.json"
    rec = _run("record", recorded, "1")
    assert rec.returncode == 0, rec.stderr[-3000:]
    built = _run("compile", recorded, "0")
    assert built.returncode == 0, built.stdout[-6000:] + built.stderr[-3000:]
    compiled, total = (int(w) for w in built.stdout.split()[1:4:2])
    assert compiled == total >= 30  # every kernel family of the decode: attention, verifies, sampling, ...
