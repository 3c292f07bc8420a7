"""Where the realistic set's warm-up goes (twin draft, eager): dec.warmup under cProfile."""
import cProfile
import io
import pstats
import sys
import time

sys.path.insert(0, "benchmarks")
from _timing import example_models  # noqa: E402

from stepgraph import RunnerConfig, SpecDecoder, Toggles  # noqa: E402

target, draft = example_models(num_layers=28, max_requests=9, draft="same")
cfg = RunnerConfig(toggles=Toggles.all(True), progress=False, buckets=tuple(range(1, 9)))
dec = SpecDecoder.for_example(target, draft, num_draft_tokens=(3, 1, 5), max_batch=8, config=cfg)
pr = cProfile.Profile()
t0 = time.perf_counter()
pr.enable()
dec.warmup(8, ("greedy", "top_k"))
pr.disable()
print(f"warmup {time.perf_counter() - t0:.1f} s", flush=True)
ks = dec.info()["keys"]
print("first keys:", [(n, round(k["warmup_ms"]), round(k["capture_ms"])) for n, k in list(ks.items())[:4]])
for order, n in (("tottime", 40), ("cumulative", 60)):
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats(order).print_stats(n)
    print(s.getvalue()[:12000])
