"""Registers and spills of the sampled verify's last launch (``_finalize_kernel``, temperature and filtered
variants) and of the ``top_p`` class's round launch (``_round_kernel`` with the pivot draws), compiled for
sm_90 without a GPU (Triton's compiler, then cuobjdump -res-usage on the cubin), at the H200 layouts of
B = 1 / 8 / 64 (K = 3, V = 151,936, bf16 logits). ``python probe_registers.py``."""

import os
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from stepgraph.kernels import _sampling_mass as M
from stepgraph.kernels import chain_sampling as C
from stepgraph.kernels._common import EXACT_ROUNDING, next_pow2
from stepgraph.kernels._sampling_filter import BLOCK
from stepgraph.kernels._sampling_pivot import SUB

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
TYPES = {"logits_ptr": "*bf16", "temp_ptr": "*fp32", "topp_ptr": "*fp32", "minp_ptr": "*fp32", "m_ptr": "*fp32",
         "s_ptr": "*fp32", "zmax_ptr": "*fp32", "state_ptr": "*fp64", "part_ptr": "*fp64",
         "pivot_total_ptr": "*fp64", "pivot_part_ptr": "*fp64", "gkey_ptr": "*i32", "gidx_ptr": "*i32",
         "kmin_ptr": "*i32", "kmax_ptr": "*i32"}  # fmt: skip


def usage(fn, consts: dict, warps: int) -> str:
    names = fn.arg_names
    sig = {n: "constexpr" if n in consts else TYPES.get(n, "*i64") if n.endswith("_ptr") else "i32" for n in names}
    src = ASTSource(fn=fn, signature=sig, constexprs={(names.index(n),): v for n, v in consts.items()})
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, **EXACT_ROUNDING})
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        out = subprocess.run([CUOBJDUMP, "-res-usage", f.name], capture_output=True, text=True).stdout
    return " ".join(w for line in out.splitlines() if "REG" in line for w in line.split()[:2])


for B in (1, 8, 64):
    n_splits, split = C.split_layout(B * 4, 151_936)
    ns_p2 = next_pow2(n_splits)
    common = dict(BLOCK=BLOCK, K1_P2=4, NS_P2=ns_p2, NB_P2=next_pow2(split // BLOCK), SHIFT=16, PIVOT=False,
                  HAS_SEQ=False, HAS_ACCEPT_LEN=False, HAS_SELECT=False)  # fmt: skip
    for filtered in (False, True):
        print(f"B={B:2d} splits={n_splits:2d} finalize filtered={filtered}: "
              f"{usage(C._finalize_kernel, dict(common, FILTERED=filtered), 8)}")  # fmt: skip
    rounds = dict(BLOCK=BLOCK, NS_P2=ns_p2, SHIFT=16, PIVOT=True, PIVOT_NB_P2=next_pow2(triton.cdiv(split, SUB.value)),
                  PIVOT_ROUNDS=64)  # fmt: skip
    print(f"B={B:2d} splits={n_splits:2d} round kernel with pivot: {usage(M._round_kernel, rounds, M.NUM_WARPS)}")
