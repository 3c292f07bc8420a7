"""Host cost of the parts of run() with 8 new host inputs (H200)."""
import ctypes, sys, time
import torch
sys.path.insert(0, "benchmarks")
from bench_runner_host import BUFFERS, B, step, host_us
from stepgraph import RunnerConfig, Sampling, StepGraphRunner, Toggles

runner = StepGraphRunner(step, BUFFERS, device="cuda",
                         config=RunnerConfig(toggles=Toggles.all(True), buckets=(4, 8, 64), progress=False))
names = list(BUFFERS)
pinned = {n: torch.zeros((B, *BUFFERS[n].shape[1:]), dtype=BUFFERS[n].dtype).pin_memory() for n in names}
dev = {n: t.cuda() for n, t in pinned.items()}
runner.run(dev, Sampling.GREEDY)
plan = runner.buffers._copy
key_graph = runner.stats(runner.key_for(B)).captured.graph
copy_graph = plan._graphs[0]
libcuda = ctypes.CDLL("libcuda.so.1")
launch = libcuda.cuGraphLaunch
launch.argtypes = (ctypes.c_void_p, ctypes.c_void_p)
launch.restype = ctypes.c_int
exec_handle = copy_graph.raw_cuda_graph_exec()
get_stream = torch._C._cuda_getCurrentRawStream
ev = torch.cuda.Event()

def stage_abandon(src):
    runner.buffers.stage(src); runner.buffers.abandon()

def raw_launch():
    rc = launch(exec_handle, get_stream(0))
    assert rc == 0, rc

cases = {
    "run(batch_size=3)": lambda: runner.run(batch_size=B),
    "run(8 host)": lambda: runner.run(pinned),
    "run(8 device)": lambda: runner.run(dev),
    "stage+abandon 8 host": lambda: stage_abandon(pinned),
    "stage+abandon 8 device": lambda: stage_abandon(dev),
    "stage+abandon 1 device": lambda: stage_abandon({"tokens": dev["tokens"]}),
    "copy graph replay()": copy_graph.replay,
    "copy graph cuGraphLaunch": raw_launch,
    "key graph replay()": key_graph.replay,
    "get raw stream": lambda: get_stream(0),
    "event record": ev.record,
    "event synchronize (done)": ev.synchronize,
}
for name, fn in cases.items():
    print(f"{name:28s} {host_us(fn):6.2f} us", flush=True)
