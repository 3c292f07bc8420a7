"""Device time of the example model's step graph (28 layers, K = 3), old and new code alike."""
import sys, torch
import stepgraph
from stepgraph import RunnerConfig, Sampling, SamplingParams, Toggles
try:
    from stepgraph import SpecDecoder
except ImportError:
    from stepgraph.spec import SpecDecoder
from stepgraph.examples.model import build

target, draft = build("qwen3-0.6b", device="cuda", dtype=torch.bfloat16, num_layers=28, max_requests=9)
g = torch.Generator().manual_seed(0)
out = []
for B in (1, 8):
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, max_batch=8,
                                  config=RunnerConfig(toggles=Toggles.all(True), progress=False, buckets=(B,)))
    reqs = dec.make_requests([torch.randint(0, 151936, (128,), generator=g).tolist() for _ in range(B)], 64, SamplingParams())
    slots = dec.admit(reqs)
    dec.step.run(slots, Sampling.GREEDY)
    ms = sorted(dec.device_step_ms(B, steps=100) for _ in range(5))[2]
    out.append(f"B={B} device {ms:.3f} ms")
    dec.finish(reqs); dec.release()
print(sys.argv[1], stepgraph.__file__, *out, flush=True)
