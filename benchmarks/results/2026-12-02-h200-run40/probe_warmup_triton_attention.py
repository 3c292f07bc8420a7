"""The realistic set's compiled warm-up (bench_adaptive.py's) with the example model's Triton decode
attention (a custom op torch.compile does not look into) in place of SDPA. Run from the repository root:

    python benchmarks/results/2026-12-02-h200-run40/probe_warmup_triton_attention.py
"""

import json
import sys

sys.path.insert(0, "benchmarks")

from _timing import example_models  # noqa: E402
from bench_adaptive import warmup_of_a_realistic_set  # noqa: E402

target, draft = example_models(num_layers=28, max_requests=9, draft="same", attention="triton")
res = warmup_of_a_realistic_set(target, draft, compile=True)
res.pop("warmup_ms_by_key")
print(json.dumps(res, indent=1))
