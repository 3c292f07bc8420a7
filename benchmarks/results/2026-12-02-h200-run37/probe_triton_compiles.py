"""Where the twin draft's warm-up of the realistic set goes: every Triton compile (or disk-cache load) it
triggers, timed by Triton's JIT hooks, grouped by kernel, with the specializations that differ.

    python3 probe_triton_compiles.py [--json OUT]    (TRITON_CACHE_DIR decides cold or warm)
"""

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

from triton import knobs

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
from _timing import example_models  # noqa: E402
from bench_adaptive import warmup_of_a_realistic_set  # noqa: E402

events, started = [], {}


def before(*, key, repr, fn, **_):
    started[str(key)] = time.perf_counter()
    return False


def after(*, key, repr, fn, **_):
    events.append((fn.name, repr, time.perf_counter() - started.pop(str(key), time.perf_counter())))


knobs.runtime.jit_cache_hook = before
knobs.runtime.jit_post_compile_hook = after

ap = argparse.ArgumentParser()
ap.add_argument("--json")
ap.add_argument("--layers", type=int, default=28)
args = ap.parse_args()
target, draft = example_models(num_layers=args.layers, max_requests=9, draft="same")
t0 = time.perf_counter()
w = warmup_of_a_realistic_set(target, draft)
total = time.perf_counter() - t0
by = defaultdict(list)
for name, rep, s in events:
    by[name].append((s, rep))
print(f"warm-up {w['seconds']:.1f} s (eager runs {w['warmup_runs_s_sum']:.1f} s, captures {w['capture_s_sum']:.1f} s); "
      f"probe total {total:.1f} s; {len(events)} compiles, {sum(e[2] for e in events):.1f} s in them")
slow = sorted(w["warmup_ms_by_key"].items(), key=lambda kv: -kv[1])
print("eager warm-up run per key (ms), slowest first: " + ", ".join(f"{k} {v:.0f}" for k, v in slow))
for name, items in sorted(by.items(), key=lambda kv: -sum(s for s, _ in kv[1])):
    print(f"{name}: {len(items)} variants, {sum(s for s, _ in items):.2f} s")
    if len(items) > 1:
        print("    " + ", ".join(f"{s:.2f}" for s, _ in items))
if args.json:
    Path(args.json).write_text(json.dumps({"warmup": w, "events": events}, indent=1))
