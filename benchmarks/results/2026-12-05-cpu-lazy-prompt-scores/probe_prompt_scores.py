"""Host time of taking a chunk forward's prompt scores into its requests (the serving loop's part), and of
reading them as lists afterwards (the reader's part): B rows of W positions, top N."""
import sys
import time

import torch

from stepgraph import SamplingParams
from stepgraph.speculative.prefill import PromptScores
from stepgraph.speculative.requests import Request
from stepgraph.speculative.scores import Scores

B, W, N = (int(a) for a in sys.argv[1:4])
g = torch.Generator().manual_seed(0)
loop, read = [], []
for _ in range(20):
    sc = Scores(torch.randn(B, W, generator=g), torch.randint(0, 150000, (B, W, N), generator=g),
                torch.randn(B, W, N, generator=g))
    reqs = [Request(i, list(range(W + 1)), 8, SamplingParams(prompt_logprobs=N)) for i in range(B)]
    holder = PromptScores(sc)
    for i, r in enumerate(reqs):
        r.start_prompt_scores()
        r.prompt_pending.append((holder, i, W))
    t0 = time.perf_counter()
    for r in reqs:
        r.take_prompt_scores()
    t1 = time.perf_counter()
    for r in reqs:
        assert len(r.prompt_logprobs) == W + 1 and len(r.prompt_top_logprobs[1]) == N
    t2 = time.perf_counter()
    loop.append(t1 - t0)
    read.append(t2 - t1)
loop.sort(); read.sort()
print(f"B={B} W={W} N={N}: loop {loop[10] * 1e3:.2f} ms, reader {read[10] * 1e3:.2f} ms (medians of 20)")
