"""Registers and spills of the small top-k class's per-row kernels, compiled for sm_90 without a GPU
(Triton's compiler, then cuobjdump -res-usage on the cubin; the cut kernel as committed:
``registers_two_launch.log`` is the version with a wide launch of its own, since folded back), at the H200 layouts of B = 1 / 8 / 64 (K = 3,
V = 151,936, bf16 logits). ``python probe_registers.py``."""

import os
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from stepgraph.kernels import _sampling_topk as T
from stepgraph.kernels._common import EXACT_ROUNDING, next_pow2
from stepgraph.kernels.chain_sampling import split_layout

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
POINTERS = {"logits_ptr": "*bf16", "draft_ptr": "*i64", "temp_ptr": "*fp32", "topk_ptr": "*i64", "topp_ptr": "*fp32",
            "minp_ptr": "*fp32", "m_ptr": "*fp32", "s_ptr": "*fp32", "cut_ptr": "*i64", "scratch_ptr": "*fp64"}  # fmt: skip


def usage(fn, consts: dict, warps: int, extra: dict | None = None) -> str:
    names = fn.arg_names
    sig = {n: "constexpr" if n in consts else POINTERS.get(n, "*i32") if n.endswith("_ptr") else "i32" for n in names}
    src = ASTSource(fn=fn, signature=sig, constexprs={(names.index(n),): v for n, v in consts.items()})
    kernel = triton.compile(
        src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, **EXACT_ROUNDING, **(extra or {})}
    )
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        out = subprocess.run([CUOBJDUMP, "-res-usage", f.name], capture_output=True, text=True).stdout
    return " ".join(w for line in out.splitlines() if "REG" in line for w in line.split()[:2])


for B in (1, 8, 64):
    n_splits, _ = split_layout(B * 4, 151_936)
    ns_p2 = next_pow2(n_splits)
    consts = dict(BLOCK=T.PASS_BLOCK, NS_P2=ns_p2, SHIFT=16, BITS=16, GCAP=T.GATHER_CAP, SMALL=T.SMALL_LIST)
    extra = {"maxnreg": T.CUT_REGISTERS} if hasattr(T, "CUT_REGISTERS") else {}
    print(f"B={B:2d} splits={n_splits:2d} cut kernel: {usage(T._cut_kernel, consts, T.CUT_WARPS, extra)}")
    per = min(T.PASS_BLOCK, T.MAXIMA_PER_ROW // ns_p2)
    print(
        f"B={B:2d} splits={n_splits:2d} bound kernel: {usage(T._bound_kernel, dict(M=per, MAXIMA=per * ns_p2, SHIFT=16), 8)}"
    )
