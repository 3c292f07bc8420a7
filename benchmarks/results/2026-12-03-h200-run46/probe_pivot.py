"""The top_p class's sampled verify (pivot draws) per instance with 20 in one CUDA graph, as
run 44's probe_top_p.py measures it: ``python probe_pivot.py LABEL [SETTING=VALUE ...]`` sets module
settings of ``_sampling_pivot`` first (``LONE=4096``: the lone pass's step, in call 1's variants;
``SEPARATE=4``). The kernels under test are copied in place before each process (variants/)."""

import sys
from pathlib import Path

import torch
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from _timing import per_instance_us  # noqa: E402

from stepgraph.kernels import _sampling_pivot  # noqa: E402
from stepgraph.kernels.chain_sampling import chain_verify_sampling  # noqa: E402

K, V = 3, 151_936
CASES = {"top-p 0.9": (0.9, 0.0, 1.0), "top-p 0.9 peaked": (0.9, 0.0, 4.0), "top-p 0.5": (0.5, 0.0, 1.0),
         "top-p 0.9 + min-p 0.05": (0.9, 0.05, 1.0)}  # fmt: skip
label = sys.argv[1]
for setting in sys.argv[2:]:
    name, value = setting.split("=")
    setattr(_sampling_pivot, name, tl.constexpr(int(value)) if name == "LONE" else int(value))
for B in (1, 8, 64):
    for name, (p, mp, scale) in CASES.items():
        torch.manual_seed(0)
        x = (torch.randn(B, K + 1, V, device="cuda") * scale).bfloat16()
        d = torch.argmax(x, -1)[:, :K].contiguous()
        args = (x, d, torch.full((B,), 0.8, device="cuda"), torch.zeros(B, dtype=torch.int64, device="cuda"),
                torch.full((B,), p, device="cuda"), torch.arange(B, device="cuda"),
                torch.zeros(B, dtype=torch.int64, device="cuda"))  # fmt: skip
        mpv = torch.full((B,), mp, device="cuda")
        us = per_instance_us(lambda: chain_verify_sampling(*args, min_p=mpv, filtered=True, pivot=True))
        print(f"{label:10s} B={B:2d} {name:24s} {us:8.1f} us", flush=True)
