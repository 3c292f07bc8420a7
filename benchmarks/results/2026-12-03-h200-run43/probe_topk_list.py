"""The small top-k class up to a top-k of 1024: a sampled verify per instance, 20 in one CUDA graph
(benchmarks/_timing.per_instance_us), at B = 1 / 8 / 64, against the general class on the same rows.
Logits as bench_kernels.py makes them (bf16 randn, temperature 0.8), K = 3, V = 151,936.
``python probe_topk_list.py LABEL [SMALL_LIST ...]``: each SMALL_LIST value is timed in turn."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from _timing import per_instance_us  # noqa: E402

from stepgraph.kernels import _sampling_topk  # noqa: E402
from stepgraph.kernels.chain_sampling import chain_verify_sampling  # noqa: E402

K, V = 3, 151_936
CASES = {  # name: top_k, top_p, min_p
    "top-k 50 + top-p 0.9": (50, 0.9, 0.0),
    "top-k 20 + min-p 0.1": (20, 1.0, 0.1),
    "top-k 256": (256, 1.0, 0.0),
    "top-k 1000": (1000, 1.0, 0.0),
    "top-k 1000 + top-p 0.9": (1000, 0.9, 0.0),
}
label, widths = sys.argv[1], [int(w) for w in sys.argv[2:]] or [None]
for width in widths:
    if width is not None:
        _sampling_topk.SMALL_LIST = width
    for B in (1, 8, 64):
        for name, (k, p, mp) in CASES.items():
            x = torch.randn(B, K + 1, V, device="cuda").bfloat16()
            d = torch.argmax(x, -1)[:, :K].contiguous()
            args = (x, d, torch.full((B,), 0.8, device="cuda"), torch.full((B,), k, device="cuda"),
                    torch.full((B,), p, device="cuda"), torch.arange(B, device="cuda"),
                    torch.zeros(B, dtype=torch.int64, device="cuda"))  # fmt: skip
            mpv = torch.full((B,), mp, device="cuda")
            small = k <= _sampling_topk.TOP_K_MAX
            kinds = {"small": True, "general": False} if small else {"general": False}
            for kind, flag in kinds.items():
                if kind == "general" and width not in (None, widths[0]):
                    continue  # the general class does not depend on the list width
                us = per_instance_us(lambda: chain_verify_sampling(*args, min_p=mpv, filtered=True, small_top_k=flag))
                print(f"{label} width={width} B={B:2d} {name:24s} {kind:8s} {us:8.1f} us", flush=True)
