"""Host cost of the parts of run() with new inputs (H200): median of 400 calls, the device idle before each."""
import ctypes, sys, time
import torch
sys.path.insert(0, "benchmarks")
from bench_runner_host import BUFFERS, B, step, host_us
from stepgraph import RunnerConfig, Sampling, StepGraphRunner, Toggles

runner = StepGraphRunner(step, BUFFERS, device="cuda",
                         config=RunnerConfig(toggles=Toggles.all(True), buckets=(4, 8, 64), progress=False))
names = list(BUFFERS)
pageable = {n: torch.zeros((B, *BUFFERS[n].shape[1:]), dtype=BUFFERS[n].dtype) for n in names}
dev = {n: t.cuda() for n, t in pageable.items()}
one_host, one_dev = {"tokens": pageable["tokens"]}, {"tokens": dev["tokens"]}
runner.run(dev, Sampling.GREEDY)
bufs, plan = runner.buffers, runner.buffers._copy
ring = plan.ring
key_graph = runner.stats(runner.key_for(B)).captured.graph
copy_graph = ring._graph
libcuda = ctypes.CDLL("libcuda.so.1")
launch = libcuda.cuGraphLaunch
launch.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
launch.restype = ctypes.c_int
exec_handle = copy_graph.raw_cuda_graph_exec()
get_stream = torch._C._cuda_getCurrentRawStream
ev = torch.cuda.Event()  # recorded below; the ring's own events record once per 8 copies
ev.record()

def stage_abandon(src):
    bufs.stage(src); bufs.abandon()

def stage_commit(src):
    bufs.stage(src); bufs.commit(4)

# (Launching the copy graph by hand, as two cases below do, advances the device's count of copies behind the
# ring's back: the runs of the second pass then copy stale tables. Their host time is what is measured here.)
def raw_launch():
    launch(exec_handle, get_stream(0))

cases = {
    "run(batch_size=3)": lambda: runner.run(batch_size=B),
    "run(1 host)": lambda: runner.run(one_host),
    "run(1 device)": lambda: runner.run(one_dev),
    "run(8 host)": lambda: runner.run(pageable),
    "run(8 device)": lambda: runner.run(dev),
    "stage+abandon 1 host": lambda: stage_abandon(one_host),
    "stage+abandon 8 host": lambda: stage_abandon(pageable),
    "stage+abandon 8 device": lambda: stage_abandon(dev),
    "stage+commit 1 host": lambda: stage_commit(one_host),
    "stage+commit 8 host": lambda: stage_commit(pageable),
    "ring take": ring.take,
    "copy graph via ring._driver": lambda: ring._driver.launch(copy_graph, ring._graph_exec),
    "copy graph cuGraphLaunch (cached handle)": raw_launch,
    "key graph replay()": key_graph.replay,
    "get raw stream": lambda: get_stream(0),
    "event record (torch)": ev.record,
    "event record (driver)": lambda: ring._driver.record(ev),
    "event synchronize (done)": ev.synchronize,
    "event query (done)": ev.query,
    "empty lambda": lambda: None,
}
for rep in range(2):
    print(f"--- pass {rep + 1}")
    for name, fn in cases.items():
        print(f"{name:42s} {host_us(fn):6.2f} us", flush=True)
