"""Sampled verify per instance with 20 in one CUDA graph (bf16 logits ``randn``, V = 151,936, K = 3,
temperature 0.8) for the classes whose small top-k rows find their cut from lists (the ``top_k`` class, and
the ``top_p`` class with small top-k requests among its own), and the registers of the cut and last launches
as compiled: ``python probe_lists.py LABEL``. A case of several settings gives request ``b`` the setting
``b % n``."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from _timing import per_instance_us  # noqa: E402

from stepgraph.kernels import _sampling_topk, chain_sampling  # noqa: E402
from stepgraph.kernels.chain_sampling import chain_verify_sampling  # noqa: E402

K, V = 3, 151_936
TOP_P = {"filtered": True, "pivot": True}
TOP_K = {"filtered": True, "small_top_k": True}
#: name: (class options, [(top_k, top_p), ...] taken in turns)
CASES = {
    "top-k 50 + top-p 0.9, top_k class": (TOP_K, [(50, 0.9)]),
    "top-k 50, top_k class": (TOP_K, [(50, 1.0)]),
    "top-k 1000, top_k class": (TOP_K, [(1000, 1.0)]),
    "top-k 1000 + top-p 0.9, top_k class": (TOP_K, [(1000, 0.9)]),
    "mix top-k 50 + top-p 0.9 / top-p 0.9": (TOP_P, [(50, 0.9), (0, 0.9)]),
    "mix top-k 20 + top-p 0.8 / top-p 0.9 / temp": (TOP_P, [(20, 0.8), (0, 0.9), (0, 1.0)]),
    "top-k 1000, top_p class": (TOP_P, [(1000, 1.0)]),
    "top-p 0.9": (TOP_P, [(0, 0.9)]),
}
label = sys.argv[1]
for B in (1, 8, 64):
    for name, (mode, settings) in CASES.items():
        torch.manual_seed(0)
        x = torch.randn(B, K + 1, V, device="cuda").bfloat16()
        d = torch.argmax(x, -1)[:, :K].contiguous()
        k = torch.tensor([settings[b % len(settings)][0] for b in range(B)], device="cuda")
        p = torch.tensor([settings[b % len(settings)][1] for b in range(B)], device="cuda")
        args = (x, d, torch.full((B,), 0.8, device="cuda"), k, p, torch.arange(B, device="cuda"),
                torch.zeros(B, dtype=torch.int64, device="cuda"))  # fmt: skip
        us = per_instance_us(lambda: chain_verify_sampling(*args, **mode))
        print(f"{label:6s} B={B:2d} {name:44s} {us:8.1f} us", flush=True)
for name, fn in (("cut", _sampling_topk._cut_kernel), ("last", chain_sampling._finalize_kernel)):
    for cache in fn.device_caches.values():
        for kernel in cache[0].values():
            kernel._init_handles()
            print(f"{label:6s} {name} kernel: regs {kernel.n_regs} spills {kernel.n_spills} "
                  f"shared {kernel.metadata.shared}")  # fmt: skip
