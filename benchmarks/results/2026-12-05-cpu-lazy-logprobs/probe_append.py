"""Host time a step spends handing a batch its log-probabilities: the scheduler's part of
``Scheduler.consume`` (its host arrays, one row each) and ``Request.append`` of 3 tokens a request,
B = 32 requests, K + 1 = 4 rows, top 20; best of 30 repeats of 50 steps. Then the time to read every
request's ``logprobs`` and ``top_logprobs`` once after the 50 steps (what a caller pays, off the step's path).

    PYTHONPATH=<tree> python probe_append.py
"""

import time

import torch

from stepgraph import SamplingParams
from stepgraph.speculative.requests import Request

B, R, N, STEPS = 32, 4, 20, 50
scores = {
    "logprobs": torch.randn(B, R),
    "top_ids": torch.randint(0, 151936, (B, R, N)),
    "top_logprobs": torch.randn(B, R, N),
}


def step(requests: list[Request]) -> None:
    arrays = [t.numpy().copy() for t in scores.values()]  # as the scheduler keeps them (a copy of each)
    for b, r in enumerate(requests):
        r.append([1, 2, 3], tuple(a[b] for a in arrays))


best_step = best_read = float("inf")
for _ in range(30):
    requests = [Request(i, [1], 10**9, SamplingParams(logprobs=N)) for i in range(B)]
    start = time.perf_counter()
    for _ in range(STEPS):
        step(requests)
    best_step = min(best_step, (time.perf_counter() - start) / STEPS)
    start = time.perf_counter()
    for r in requests:
        assert len(r.logprobs) == len(r.top_logprobs) == 3 * STEPS
    best_read = min(best_read, time.perf_counter() - start)
print(f"B = {B}, top {N}: {best_step * 1e6:.1f} us a step; reading them after {STEPS} steps: {best_read * 1e3:.2f} ms")
