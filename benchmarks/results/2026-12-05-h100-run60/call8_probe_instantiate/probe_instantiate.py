"""The twin's realistic set: where its warm-up goes per part, instantiation included (info's instantiate_ms)."""
import sys
import time

sys.path.insert(0, "benchmarks")
from _timing import example_models  # noqa: E402

from stepgraph import RunnerConfig, SpecDecoder, Toggles  # noqa: E402

target, draft = example_models(num_layers=28, max_requests=9, draft="same")
cfg = RunnerConfig(toggles=Toggles.all(True), progress=False, buckets=tuple(range(1, 9)))
for _ in range(2):
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=(3, 1, 5), max_batch=8, config=cfg)
    t0 = time.perf_counter()
    dec.warmup(8, ("greedy", "top_k"))
    s = time.perf_counter() - t0
    keys = dec.info()["keys"].values()
    parts = {f: round(sum(k[f] for k in keys) / 1e3, 2) for f in ("warmup_ms", "capture_ms", "instantiate_ms")}
    inst = sorted(k["instantiate_ms"] for k in keys)
    print(f"warm-up {s:.2f} s: {parts}; instantiate per key min/median/max {inst[0]:.1f}/{inst[len(inst)//2]:.1f}/{inst[-1]:.1f} ms")
    dec.release()
