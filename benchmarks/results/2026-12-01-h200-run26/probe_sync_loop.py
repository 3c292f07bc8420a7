"""Run 26 probe: where the synchronous loop's host time goes on the all-greedy Poisson trace of
bench_serving.py, phase by phase, against two fixed-batch references at batch 13 (the trace's mean):
the benchmark's (launch + read tokens) and the whole loop body with the batch held fixed.

    python3 benchmarks/results/2026-12-01-h200-run26/probe_sync_loop.py
"""

import sys
import time
from collections import defaultdict

sys.path.insert(0, "benchmarks")
import bench_serving as bs  # noqa: E402
import torch  # noqa: E402

from stepgraph import RunnerConfig, Toggles  # noqa: E402
from stepgraph.examples.model import build  # noqa: E402
from stepgraph.spec.generate import SpecDecoder  # noqa: E402
from stepgraph.spec.scheduler import Scheduler  # noqa: E402
from stepgraph.spec.slots import SlotAllocator  # noqa: E402

spent: dict[str, float] = defaultdict(float)
calls: dict[str, int] = defaultdict(int)


def timed(owner, name, label):
    inner = getattr(owner, name)

    def wrapper(*a, **k):
        t0 = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            spent[label] += time.perf_counter() - t0
            calls[label] += 1

    setattr(owner, name, wrapper)


cuda = torch.cuda.is_available()  # the CPU: a smoke run of the probe itself
target, draft = build("qwen3-0.6b" if cuda else "tiny", device="cuda" if cuda else "cpu",
                      dtype=torch.bfloat16 if cuda else torch.float32, num_layers=28 if cuda else 1, max_requests=18,
                      max_seq_len=1024)  # fmt: skip
cfg = RunnerConfig(toggles=Toggles.all(True), progress=False)
dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, max_batch=16, config=cfg)
dec.warmup(16)
dec.record_step_events = True
work = bs.trace(64 if cuda else 14, 40.0, True, target.cfg.vocab_size, greedy_only=True)
bs.serve(dec, work, False)
for owner, name in ((Scheduler, "launch"), (Scheduler, "read_tokens"), (Scheduler, "consume"),
                    (Scheduler, "admit"), (Scheduler, "_wait_for_arrival"), (SlotAllocator, "give_back"),
                    (type(dec.step), "run")):  # fmt: skip
    timed(owner, name, f"{owner.__name__}.{name}")
spent.clear(), calls.clear()
run = bs.serve(dec, work, False)
steps = run["steps"]
print(f"trace: {steps} steps, mean step {run['mean_step_ms']:.3f} ms, device {run['step_device_ms']:.3f} ms, "
      f"decode {run['decode_s']:.3f} s, prefill {run['prefill_s']:.3f} s, wall {run['wall_s']:.3f} s")  # fmt: skip
for label in sorted(spent, key=spent.get, reverse=True):
    print(
        f"  {label:28s} {spent[label] * 1e3:9.1f} ms  {calls[label]:5d} calls  {spent[label] / steps * 1e6:8.1f} us/step"
    )
b = 13
print(f"fixed batch {b}, launch + read tokens: {bs.fixed_batch_ms(dec, work['prompts'], b):.3f} ms")
reqs = dec.make_requests(work["prompts"][:b], max_new_tokens=200)
dec.admit(reqs)
sched = dec.scheduler
for _ in range(2):
    bs.sync()
    t0 = time.perf_counter()
    for _ in range(30):
        sched.consume(reqs, sched.read_tokens(sched.launch(reqs)["tokens"]))
    print(f"fixed batch {b}, the loop body (launch with events, read, consume): "
          f"{(time.perf_counter() - t0) / 30 * 1e3:.3f} ms")  # fmt: skip
dec.finish(reqs)
