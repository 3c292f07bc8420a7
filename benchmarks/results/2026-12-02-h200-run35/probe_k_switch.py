"""Probe (issue 32, run 35): does changing K between steps cost time? The bench_adaptive setup (example
model, 28 layers, twin draft at acceptance 0.9, 48 tokens), decode tokens/s and mean step time of fixed
K = 1, fixed K = 2, and a policy alternating 1, 2, 1, 2, ...; also the host time of auto's choose() and
observe() at B = 64."""
import sys
import time

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402
from _timing import example_models, sync  # noqa: E402

from stepgraph import RunnerConfig, SpecDecoder, Toggles  # noqa: E402
from stepgraph.examples.model import TwinDraft  # noqa: E402
from stepgraph.speculative.draft_policy import AutoDraftLength, FixedDraftLength  # noqa: E402


class Alternate(FixedDraftLength):
    def choose(self, batch, bucket):
        self.draft_len = 3 - self.draft_len
        return self.draft_len


target, draft = example_models(num_layers=28, max_requests=65, draft="same")
g = torch.Generator().manual_seed(0)
prompts = [torch.randint(0, target.cfg.vocab_size, (32,), generator=g).tolist() for _ in range(64)]
cfg = RunnerConfig(toggles=Toggles.all(True), progress=False, buckets=(1, 4, 8, 16, 32, 64))
dec = SpecDecoder.for_example(target, TwinDraft(draft.model, 0.9), num_draft_tokens=(1, 2), max_batch=64, config=cfg)
dec.warmup(64)
for B in (8, 16):
    for rnd in range(3):
        for name, pol in (("K=1", FixedDraftLength(1)), ("K=2", FixedDraftLength(2)), ("1,2,1,2", Alternate(1))):
            dec.policy = pol
            dec.stats = type(dec.stats)()
            sync()
            out = dec.generate(prompts[:B], max_new_tokens=48)
            sync()
            st = dec.stats
            print(f"B={B} round {rnd} {name}: {sum(map(len, out)) / st.decode_seconds:.0f} tok/s, "
                  f"{st.decode_seconds / st.steps * 1e3:.3f} ms/step, {st.steps} steps, "
                  f"accept len {st.mean_accept_len:.3f}", flush=True)
auto = AutoDraftLength(step_ms=lambda b, k: 1.0 + k)


class R:
    def __init__(self, i):
        self.id = i


rs = [R(i) for i in range(64)]
auto.observe(rs, [1] * 64, 2)
t0 = time.perf_counter()
for _ in range(200):
    auto.choose(rs, 64)
t1 = time.perf_counter()
for _ in range(200):
    auto.observe(rs, [1] * 64, 2)
t2 = time.perf_counter()
print(f"auto at B=64: choose {(t1 - t0) / 200 * 1e6:.1f} us, observe {(t2 - t1) / 200 * 1e6:.1f} us")
