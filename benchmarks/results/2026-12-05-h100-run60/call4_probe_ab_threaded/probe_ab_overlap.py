"""The twin's realistic set warmed up with each key's instantiation beside the next key's warm-up
("overlap", the new code) and right after its capture ("serial"), in turns in one process."""
import contextlib
import gc
import statistics
import sys
import time

sys.path.insert(0, "benchmarks")
from _timing import example_models  # noqa: E402

from stepgraph import RunnerConfig, SpecDecoder, Toggles  # noqa: E402
from stepgraph.keytable import KeyTable  # noqa: E402

target, draft = example_models(num_layers=28, max_requests=9, draft="same")
cfg = RunnerConfig(toggles=Toggles.all(True), progress=False, buckets=tuple(range(1, 9)))
overlapped = KeyTable.overlapped


@contextlib.contextmanager
def serial(self):
    yield


def once(mode):
    KeyTable.overlapped = overlapped if mode == "overlap" else serial
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=(3, 1, 5), max_batch=8, config=cfg)
    t0 = time.perf_counter()
    dec.warmup(8, ("greedy", "top_k"))
    s = time.perf_counter() - t0
    keys = dec.info()["keys"].values()
    parts = [sum(k[f] for k in keys) / 1e3 for f in ("warmup_ms", "capture_ms", "instantiate_ms")]
    dec.release()
    del dec
    gc.collect()
    return s, parts


once("overlap")  # first uses
res = {"overlap": [], "serial": []}
for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
    for mode in (("overlap", "serial") if r % 2 == 0 else ("serial", "overlap")):
        s, (w, c, i) = once(mode)
        res[mode].append(s)
        print(f"{mode}: {s:.2f} s (eager runs {w:.2f}, captures {c:.2f}, instantiations {i:.2f})", flush=True)
for mode, xs in res.items():
    print(f"{mode}: median {statistics.median(xs):.2f} s of {[round(x, 2) for x in xs]}")
