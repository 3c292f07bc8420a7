"""Every Triton kernel variant a decode launches compiles for a GPU (sm_90), here, without one.

The interpreter runs a kernel as Python, and Python accepts what Triton's compiler refuses: a loop
variable that changes type between iterations passed every CPU test and failed to compile on the GPU.
So a decode through every kind of kernel records each launch's argument types and constexprs in the
interpreter, and Triton's compiler then builds each of those variants for the H200's architecture. The
helper's ``sass`` mode reports a variant's registers and loops from the same recording.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.kernels.gpu_compile_check import sass_loops

HELPER = Path(__file__).with_name("gpu_compile_check.py")
ROOT = HELPER.parents[2]

on_the_cpu = pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU suite compiles them for real")


def _run(mode: str, *args, interpret: str = "0") -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": interpret, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(HELPER), mode, *map(str, args)], env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    pytest.importorskip("triton.backends.nvidia.compiler")
    path = tmp_path_factory.mktemp("launches") / "launches.json"
    rec = _run("record", path, interpret="1")
    assert rec.returncode == 0, rec.stderr[-3000:]
    return path


@pytest.mark.slow  # compiling every variant for sm_90: a minute or two with a cold Triton cache, as in CI
@on_the_cpu
def test_every_launched_variant_compiles_for_sm90(recorded):
    built = _run("compile", recorded)
    assert built.returncode == 0, built.stdout[-6000:] + built.stderr[-3000:]
    compiled, total = (int(w) for w in built.stdout.split()[1:4:2])
    assert compiled == total >= 30  # every kernel family of the decode: attention, verifies, sampling, ...


@pytest.mark.slow  # shares the recording, a decode through every kernel in the interpreter
@on_the_cpu
def test_sass_mode_reports_a_variants_registers_and_loops(recorded, tmp_path):
    kernel = "_temperature_kernel"  # a pass over the vocabulary: a loop (its split is a runtime argument)
    report = _run("sass", recorded, tmp_path, "--kernel", kernel, "--set", "BLOCK=512")
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    heads = re.findall(rf"^{kernel}-\d+: registers (\d+), stack (\d+) bytes; (.*)$", report.stdout, re.M)
    assert heads and all(int(regs) > 0 for regs, _, _ in heads), report.stdout
    assert all("'BLOCK': 512" in constexprs for _, _, constexprs in heads), report.stdout
    loops = re.findall(
        r"^  loop 0x[0-9a-f]+-0x[0-9a-f]+: +(\d+) instructions, ldl/stl +\d+ ldg +(\d+)", report.stdout, re.M
    )
    assert loops and any(int(ldg) > 0 for _, ldg in loops), report.stdout  # the pass over the vocabulary loads
    assert kernel in (tmp_path / f"{kernel}-0.sass").read_text()
    unknown = _run("sass", recorded, tmp_path, "--kernel", "no_such_kernel")
    assert unknown.returncode != 0 and "no recorded variant of 'no_such_kernel'" in unknown.stderr
    misspelt = _run("sass", recorded, tmp_path, "--kernel", kernel, "--set", "BLOKC=512")
    assert misspelt.returncode != 0 and "--set BLOKC: not a constexpr" in misspelt.stderr


def test_sass_loops_are_the_backward_branches():
    sass = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E R2, desc[UR4][R4.64] ;
        /*0020*/                   LDL R3, [R1] ;
        /*0030*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0040*/                   SHFL.BFLY PT, R5, R2, 0x1, 0x1f ;
        /*0050*/               @P0 BRA 0x10 ;
        /*0060*/                   DADD R6, R6, R8 ;
        /*0070*/                   STG.E desc[UR4][R4.64], R6 ;
        /*0080*/              @!P1 BRA 0x60 ;
        /*0090*/                   BRA 0xa0 ;
        /*00a0*/                   EXIT ;
        /*00b0*/                   BRA 0xb0 ;
    """
    first, second = sass_loops(sass)
    assert first == {"start": 0x10, "end": 0x50, "instructions": 5, "ldl/stl": 1, "ldg": 1, "stg": 0, "bar": 1,
                     "shfl": 1, "dadd": 0}  # fmt: skip
    assert second == {"start": 0x60, "end": 0x80, "instructions": 3, "ldl/stl": 0, "ldg": 0, "stg": 1, "bar": 0,
                      "shfl": 0, "dadd": 1}  # fmt: skip
