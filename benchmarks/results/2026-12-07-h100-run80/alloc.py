"""Dump the TTGIR after shared-memory allocation: alloc.py REC.json OUT k=v ..."""
import sys, json
sys.path.insert(0, "tests/kernels"); sys.path.insert(0, ".")
import gpu_compile_check as g
from triton.backends.nvidia import compiler as C
from triton._C.libtriton import ir, passes, nvidia
orig = C.CUDABackend.make_llir
def dump(self, src, metadata, options, capability):
    pm = ir.pass_manager(src.context)
    passes.ttgpuir.add_combine_tensor_select_and_if(pm)
    passes.ttgpuir.add_allocate_warp_groups(pm)
    passes.convert.add_scf_to_cf(pm)
    passes.gluon.add_inliner(pm)
    nvidia.passes.ttgpuir.add_allocate_shared_memory_nv(pm, capability, C.get_ptx_version_from_options(options, self.target.arch))
    pm.run(src, "alloc")
    open(sys.argv[2], "w").write(str(src))
    raise SystemExit(0)
C.CUDABackend.make_llir = dump
e = json.load(open(sys.argv[1]))[0]
over = {k: int(v) for k, v in (a.split("=") for a in sys.argv[3:])}
g._compiled(e, over)
