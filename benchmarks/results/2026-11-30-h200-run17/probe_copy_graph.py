"""Host cost of launching copy graphs of different forms (scratch probe)."""

import sys

sys.path.insert(0, "benchmarks")
import torch
import triton
import triton.language as tl
from bench_runner_host import host_us, loop_us

from stepgraph.kernels._copy_in_kernel import BLOCK, _copy_in_kernel


@triton.jit
def _fetch(src_addr, dst_addr, N: tl.constexpr):
    src = src_addr.to(tl.pointer_type(tl.int64))
    dst = dst_addr.to(tl.pointer_type(tl.int64))
    i = tl.arange(0, N)
    tl.store(dst + i, tl.load(src + i))


@triton.jit
def _noop(x_ptr):
    tl.store(x_ptr, tl.load(x_ptr) + 1)


nbytes = 1024
T = torch.zeros(nbytes, dtype=torch.uint8, pin_memory=True)
D = torch.zeros(nbytes, dtype=torch.uint8, device="cuda")
X = torch.zeros(1, device="cuda")
grid = (8, 64)


def cap(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        g.capture_begin(capture_error_mode="thread_local")
        fn()
        g.capture_end()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    return g


gA = cap(lambda: (D.copy_(T, non_blocking=True), _copy_in_kernel[grid](D.data_ptr(), BLOCK=BLOCK)))
gB = cap(
    lambda: (_fetch[(1,)](T.data_ptr(), D.data_ptr(), N=nbytes // 8), _copy_in_kernel[grid](D.data_ptr(), BLOCK=BLOCK))
)
gC = cap(lambda: _copy_in_kernel[grid](D.data_ptr(), BLOCK=BLOCK))
gN = cap(lambda: _noop[(1,)](X))
ev = torch.cuda.Event()
for name, fn in [
    ("noop graph", gN.replay),
    ("copy kernel only", gC.replay),
    ("memcpy node + kernel (now)", gA.replay),
    ("fetch kernel + kernel", gB.replay),
    ("two replays: noop + noop", lambda: (gN.replay(), gN.replay())),
    ("event record", ev.record),
    ("event record+sync", lambda: (ev.record(), ev.synchronize())),
    ("event query", ev.query),
]:
    print(
        f"{name:32s} host {host_us(fn):6.2f} us   back to back wall/device {loop_us(fn)[0]:6.2f}/{loop_us(fn)[1]:6.2f} us"
    )
