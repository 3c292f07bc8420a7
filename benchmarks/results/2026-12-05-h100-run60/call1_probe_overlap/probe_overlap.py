"""Can a key's graph instantiation (torch's instantiate, and the fused exec through ctypes) run in a thread
while the main thread runs the next key's eager warm-up step? Twin draft, 28 layers, K = 5."""
import statistics
import sys
import threading
import time

import torch

sys.path.insert(0, "benchmarks")
from _timing import example_models  # noqa: E402

from stepgraph import RunnerConfig, SpecDecoder, Toggles  # noqa: E402

target, draft = example_models(num_layers=28, max_requests=9, draft="same")
cfg = RunnerConfig(toggles=Toggles.all(True), progress=False, buckets=tuple(range(1, 9)))
dec = SpecDecoder.for_example(target, draft, num_draft_tokens=(3, 1, 5), max_batch=8, config=cfg)
runner = dec.runner
real_inst = torch.cuda.CUDAGraph.instantiate
torch.cuda.CUDAGraph.instantiate = lambda self: None
keys = [runner.key_for(b, "greedy", k) for k in (5, 3) for b in range(8, 0, -1)]
t0 = time.perf_counter()
with dec.step.relay.parked():
    runner.capture(keys)
print(f"captured {len(keys)} keys in {time.perf_counter() - t0:.1f} s", flush=True)
torch.cuda.CUDAGraph.instantiate = real_inst
graphs = [runner.stats(k).captured.graph for k in keys]
ekey = keys[0]
# the ring exists after one copy with inputs
runner.buffers.fuse(graphs[-1]).close()


def eager():
    runner._call_step(ekey)
    torch.cuda.synchronize()


def timed(fn):
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


with dec.step.relay.parked():
    for _ in range(2):
        eager()
    alone = [timed(eager) for _ in range(5)]
    print(f"eager step alone: {[round(x, 1) for x in alone]} ms", flush=True)
    it = iter(graphs[:-1])
    inst_alone = [timed(lambda: (real_inst(next(it)), torch.cuda.synchronize())) for _ in range(3)]
    print(f"instantiate alone: {[round(x, 1) for x in inst_alone]} ms", flush=True)
    fuse_alone = []
    for g in graphs[:3]:
        t = time.perf_counter()
        f = runner.buffers.fuse(g)
        fuse_alone.append((time.perf_counter() - t) * 1e3)
        f.close()
    print(f"fuse alone: {[round(x, 1) for x in fuse_alone]} ms", flush=True)

    def background(work):
        out = {}

        def run():
            t = time.perf_counter()
            work()
            out["ms"] = (time.perf_counter() - t) * 1e3

        th = threading.Thread(target=run)
        t = time.perf_counter()
        th.start()
        eager()
        main_ms = (time.perf_counter() - t) * 1e3
        th.join()
        total = (time.perf_counter() - t) * 1e3
        return main_ms, out["ms"], total

    rows = []
    for g in graphs[3:9]:
        def work(g=g):
            real_inst(g)
            f = runner.buffers.fuse(g)
            f.close()

        rows.append(background(work))
    for r in rows:
        print(f"concurrent (instantiate + fuse in a thread): main {r[0]:.1f} ms, thread {r[1]:.1f} ms, both {r[2]:.1f} ms")
    print(f"median main {statistics.median(r[0] for r in rows):.1f} vs alone {statistics.median(alone):.1f} ms")
    # the instantiated graphs still replay right: one replay of a background-instantiated graph
    for g in graphs[3:9]:
        g.replay()
    torch.cuda.synchronize()
    print("replays ok", flush=True)
