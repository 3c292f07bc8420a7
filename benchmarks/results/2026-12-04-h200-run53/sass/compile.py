"""Compile the round kernel for sm_90 on the CPU: python compile.py REC.pkl OUT_PREFIX"""
import pickle, sys, subprocess, re
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from stepgraph.kernels import _sampling_mass
from stepgraph.kernels._sampling_topk import maxima_per_split

fn = _sampling_mass._round_kernel
sig_rec, const_rec, opts = pickle.load(open(sys.argv[1], "rb"))
override = {"NS_P2": 8, "PIVOT_NB_P2": 128, "LIST_M": maxima_per_split(8)}
sig, consts, attrs = {}, {}, {}
DIV16 = {"stride_b", "stride_j", "SPLIT", "V"}
for i, p in enumerate(fn.params):
    n = p.name
    if p.is_constexpr:
        consts[n] = override.get(n, const_rec[n])
        sig[n] = "constexpr"
    else:
        t = sig_rec.get(n, "i32")
        sig[n] = t
        if t.startswith("*") or n in DIV16:
            attrs[(i,)] = [["tt.divisibility", 16]]
src = ASTSource(fn, sig, consts, attrs)
k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "maxnreg": opts.get("maxnreg"), "enable_fp_fusion": False})
open(sys.argv[2] + ".cubin", "wb").write(k.asm["cubin"])

open(sys.argv[2] + ".ttgir", "w").write(k.asm["ttgir"])
