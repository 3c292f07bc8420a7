"""Probe (issue 39): what the slowest gaps between step launches of the serving trace hold.

The bench_serving trace (64 requests, prompts 32-512, outputs 16-256, mixed sampling, all at once), max
batch 16, chunked prefill of 256 positions, step graph, synchronous then overlapped loop. Each gap between
two step launches is labelled with what ran in it: prefill chunk forwards (and their host time), requests
admitted, requests finished, a batch change, a first use of a key. The slowest 2% are printed with the
median of each kind of gap.
"""
import statistics
import sys
import time
from collections import defaultdict

sys.path.insert(0, "benchmarks")
from _timing import example_models, sync  # noqa: E402
from bench_serving import MAX_BATCH, K, trace  # noqa: E402

from stepgraph.speculative import scheduler as sched_mod  # noqa: E402
from stepgraph.speculative.decoder import SpecDecoder  # noqa: E402

target, draft = example_models(num_layers=28, max_requests=MAX_BATCH)
work = trace(64, 40.0, False, target.cfg.vocab_size)
S = sched_mod.Scheduler
log = []  # per gap: dict of what happened since the last launch
cur = defaultdict(float)
orig = {n: getattr(S, n) for n in ("_prefill_chunks", "launch", "consume", "_admit_waiting", "read_outputs")}


def timed(name):
    def wrap(self, *a, **kw):
        t0 = time.perf_counter()
        r = orig[name](self, *a, **kw)
        cur[name + "_ms"] += (time.perf_counter() - t0) * 1e3
        cur[name + "_n"] += 1
        return r
    return wrap


def launch(self, batch, *a, **kw):
    t0 = time.perf_counter()
    keys = len(self.step.runner.keys)
    r = orig["launch"](self, batch, *a, **kw)
    cur["batch"] = len(batch)
    cur["t"] = t0
    log.append(dict(cur))
    cur.clear()
    # what the launch itself took belongs to the gap it opens
    cur["launch_ms"] = (time.perf_counter() - t0) * 1e3
    cur["new_key"] = len(self.step.runner.keys) - keys
    return r


for n in ("_prefill_chunks", "consume", "_admit_waiting", "read_outputs"):
    setattr(S, n, timed(n))
S.launch = launch
for overlap in (False, True):
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=K, max_batch=MAX_BATCH, prefill_chunk=256)
    for timed_run in (False, True):
        log.clear()
        sync()
        dec.generate(work["prompts"], max_new_tokens=work["max_new_tokens"], sampling=work["sampling"],
                     arrivals=work["arrivals"], overlap=overlap)
        sync()
    gaps = [(b["t"] - a["t"]) * 1e3 for a, b in zip(log, log[1:])]
    rows = [dict(b, gap=g) for g, b in zip(gaps, log[1:])]
    srt = sorted(rows, key=lambda r: -r["gap"])
    p50, p99 = statistics.median(gaps), sorted(gaps)[int(0.99 * len(gaps))]
    print(f"\n{'overlapped' if overlap else 'synchronous'}: {len(gaps)} gaps, p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    kinds = defaultdict(list)
    for r in rows:
        kinds[("chunk" if r.get("_prefill_chunks_n") and r.get("_prefill_chunks_ms", 0) > 0.5 else "no chunk")].append(r["gap"])
    for k, v in kinds.items():
        print(f"  {k}: {len(v)} gaps, median {statistics.median(v):.2f} ms, max {max(v):.2f}")
    for r in srt[: max(8, len(srt) // 50)]:
        print("  gap {gap:.2f} ms (next batch {batch}): launch {l:.2f} ms, read {rd:.2f} ms, consume {c:.2f} ms,"
              " admit {a:.2f} ms, prefill {pf:.2f} ms in {pn} calls, new keys {nk}".format(
                  gap=r["gap"], batch=r.get("batch"), pf=r.get("_prefill_chunks_ms", 0),
                  pn=int(r.get("_prefill_chunks_n", 0)), c=r.get("consume_ms", 0), l=r.get("launch_ms", 0),
                  rd=r.get("read_outputs_ms", 0), a=r.get("_admit_waiting_ms", 0), nk=int(r.get("new_key", 0))))
