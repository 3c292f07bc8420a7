"""On the CPU: the body of tests/gpu/test_gpu_logprobs.py's sampled graph-against-eager test for seeds
[A, B), optionally with every torch.empty* poisoned (NaN floats, True bools, huge integers).

    PYTHONPATH=. python benchmarks/results/2026-12-05-h100-run61/cpu_logprobs.py 0 12 [--poison]
"""

import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
import torch  # noqa: E402

if "--poison" in sys.argv:
    _empty, _empty_like, _new_empty = torch.empty, torch.empty_like, torch.Tensor.new_empty

    def poison(t):
        if t.is_floating_point() or t.is_complex():
            return t.fill_(float("nan"))
        return t.fill_(True) if t.dtype == torch.bool else t.fill_(torch.iinfo(t.dtype).max // 3)

    torch.empty = lambda *a, **k: poison(_empty(*a, **k))
    torch.empty_like = lambda *a, **k: poison(_empty_like(*a, **k))
    torch.Tensor.new_empty = lambda self, *a, **k: poison(_new_empty(self, *a, **k))

from stepgraph import RunnerConfig, SamplingParams, Toggles  # noqa: E402
from stepgraph.examples.model import build  # noqa: E402
from stepgraph.speculative.decoder import SpecDecoder  # noqa: E402
from tests.e2e.test_logprobs import PROMPTS, reference  # noqa: E402

for seed in range(int(sys.argv[1]), int(sys.argv[2])):
    torch.manual_seed(0)
    target, draft = build("tiny", device="cpu")
    sampling = SamplingParams(temperature=0.8, top_k=40, seed=seed)
    got = []
    for toggles in (Toggles.all(True), Toggles(step_graph=False)):
        config = RunnerConfig(toggles=toggles, progress=False)
        dec = SpecDecoder.for_example(target, draft, max_batch=3, logprobs=5, config=config)
        requests = dec.make_requests(PROMPTS, [9, 5, 12], sampling)
        dec.serve(requests)
        got.append([(r.output, r.logprobs, r.top_logprobs) for r in requests])
        dec.release()
    worst = 0.0
    for prompt, (output, logprobs, _) in zip(PROMPTS, got[0]):
        want = reference(target, prompt, output).gather(-1, torch.tensor(output)[:, None])[:, 0]
        worst = max(worst, (torch.tensor(logprobs) - want).abs().max().item())
    print(seed, "same" if got[0] == got[1] else "DIFF", f"largest logprob error {worst:.2e}", flush=True)
