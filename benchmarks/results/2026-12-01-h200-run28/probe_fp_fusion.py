"""A/B in one process: the sampling kernels launched with and without multiply-add contraction
(``EXACT_ROUNDING``), through ``bench_kernels.py --only sampling``.

    python benchmarks/results/2026-12-01-h200-run28/probe_fp_fusion.py OUT_DIR
"""

import sys

sys.path.insert(0, "benchmarks")
import bench_kernels  # noqa: E402

from stepgraph.kernels._common import EXACT_ROUNDING  # noqa: E402

out = sys.argv[1]
for name, fusion in (("exact_1", False), ("fused", True), ("exact_2", False)):
    EXACT_ROUNDING["enable_fp_fusion"] = fusion
    sys.argv = ["bench_kernels.py", "--only", "sampling", "--out", f"{out}/{name}"]
    bench_kernels.main()
