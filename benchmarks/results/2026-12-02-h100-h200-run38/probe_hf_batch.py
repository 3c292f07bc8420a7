"""Where the HF adapter's step time goes at B = 1 and 8 (bench_hf's target, twin draft, no compile).

cd benchmarks && python3 results/2026-12-02-h100-run38/probe_hf_batch.py
"""

import sys
import time
from collections import defaultdict

sys.path.insert(0, ".")
import bench_hf  # noqa: E402
import torch  # noqa: E402
from profile_step import category  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from stepgraph import RunnerConfig  # noqa: E402
from stepgraph.adapters.hf import hf_spec_decoder  # noqa: E402

target = bench_hf.target_model()
bench_hf.scale_upper_layers(target, 0.05)
g = torch.Generator().manual_seed(0)
for B in (1, 8):
    prompts = [torch.randint(0, 151936, (32,), generator=g).tolist() for _ in range(B)]
    dec = hf_spec_decoder(target, target, max_requests=B, max_seq_len=200, config=RunnerConfig(progress=False))
    dec.warmup(B)
    dec.generate(prompts, max_new_tokens=32)
    torch.cuda.synchronize()
    dec.stats = type(dec.stats)()
    t0 = time.perf_counter()
    dec.generate(prompts, max_new_tokens=32)
    torch.cuda.synchronize()
    print(f"wall of one generate unprofiled: {(time.perf_counter() - t0) * 1e3:.1f} ms")
    dec.stats = type(dec.stats)()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        dec.generate(prompts, max_new_tokens=32)
        torch.cuda.synchronize()
    steps = dec.stats.steps
    by_cat, by_name = defaultdict(float), defaultdict(float)
    for e in prof.events():
        if e.device_type.name == "CUDA":
            by_cat[category(e.name)] += e.device_time
            by_name[e.name[:110]] += e.device_time
    print(f"\n## B = {B} (one generate of 32 tokens; stats steps {steps})")
    for c, t in sorted(by_cat.items(), key=lambda x: -x[1]):
        print(f"{c:40s} {t / 1000:9.2f} ms")
    for n, t in sorted(by_name.items(), key=lambda x: -x[1])[:25]:
        print(f"{t / 1000:9.2f} ms  {n}")
    print("host: the ops with the most self CPU time")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20, max_name_column_width=60))
    dec.release()
