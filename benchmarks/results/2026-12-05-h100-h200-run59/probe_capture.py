"""Where a key's capture time goes: the twin decoder (28 layers, draft = target), keys (1, 8) x K=5 greedy,
warmed, released, then captured again under cProfile. Usage: probe_capture.py [--compile] [--attention triton]"""
import cProfile
import io
import pstats
import sys
import time

import torch

sys.path.insert(0, "benchmarks")
from _timing import example_models  # noqa: E402

from stepgraph import RunnerConfig, SpecDecoder, Toggles  # noqa: E402

compile_ = "--compile" in sys.argv
target, draft = example_models(num_layers=28, max_requests=9, draft="same")
cfg = RunnerConfig(toggles=Toggles.all(True), progress=False, buckets=(1, 8))
dec = SpecDecoder.for_example(target, draft, num_draft_tokens=5, max_batch=8, config=cfg, compile=compile_)
t0 = time.perf_counter()
dec.warmup(8, ("greedy",))
print(f"compile={compile_} warmup {time.perf_counter() - t0:.1f} s", flush=True)
for name, k in dec.info()["keys"].items():
    print(f"  first  {name}: capture {k['capture_ms']:.1f} ms warmup {k['warmup_ms']:.1f} ms")
for rep in range(3):
    dec.runner.release()
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    with dec.step.relay.parked():
        if rep == 2:
            pr.enable()
        t0 = time.perf_counter()
        dec.runner.capture([(8, "greedy", 5), (1, "greedy", 5)])
        wall = time.perf_counter() - t0
        pr.disable()
    for name, k in dec.info()["keys"].items():
        print(f"  again{rep} {name}: capture {k['capture_ms']:.1f} ms warmup {k['warmup_ms']:.1f} ms pool {dec.info()['graph_pool_bytes']/2**20:.1f} MiB")
    print(f"  wall of capture() {wall*1e3:.1f} ms")
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
print(s.getvalue()[:6000])
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(30)
print(s.getvalue()[:6000])
