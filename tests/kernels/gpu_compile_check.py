"""Helper of ``test_kernels_compile_for_the_gpu.py``, run in subprocesses.

``record OUT``: decode through every kind of kernel in Triton's interpreter (CPU), recording each launch's
kernel, argument types and constexprs into OUT (JSON). ``compile IN``: compile each recorded variant for
a CUDA target (sm_90) with Triton's compiler, no GPU needed, and print the ones that fail.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

OPTIONS = ("num_warps", "num_stages", "num_ctas", "enable_fp_fusion", "maxnreg")
DTYPES = {
    torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "i1",
}  # fmt: skip


def _type_of(value) -> str | None:
    """The type Triton's launcher gives an argument (``None``: a constexpr-like value)."""
    if isinstance(value, torch.Tensor):
        return "*" + DTYPES[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    return None


def record(out: str) -> None:
    import inspect

    from triton.runtime.interpreter import InterpretedFunction

    seen: dict[str, dict] = {}
    run = InterpretedFunction.run

    def recording(self, *args, grid, warmup, **kwargs):
        fn = self.fn
        names = list(inspect.signature(fn).parameters)
        bound = dict(zip(names, args)) | {k: v for k, v in kwargs.items() if k in names}
        constexprs = {n for n, p in inspect.signature(fn).parameters.items() if "constexpr" in str(p.annotation)}
        sig, consts = {}, {}
        for name in names:
            if name not in bound:
                continue  # a default: the compiler takes it
            value = bound[name]
            kind = None if name in constexprs else _type_of(value)
            if kind is None:
                consts[name] = value if isinstance(value, (int, float, bool, str, type(None))) else str(value)
            else:
                sig[name] = kind
        options = {k: v for k, v in kwargs.items() if k in OPTIONS}
        entry = {"module": fn.__module__, "name": fn.__name__, "sig": sig, "constexprs": consts, "options": options}
        seen[json.dumps(entry, sort_keys=True, default=str)] = entry
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = recording
    _workloads()
    with open(out, "w") as f:
        json.dump(list(seen.values()), f)


def _workloads() -> None:
    """Every kernel family once: attention (rows, paged, planned), the Triton matmul, greedy and sampled
    verify in every class, the tail, penalties with bans, log-probabilities, prompt lookup, chunked prefill."""
    from stepgraph import SamplingParams
    from stepgraph.examples.model import build
    from stepgraph.speculative.decoder import SpecDecoder

    prompts = [[5, 17, 99, 3, 17], [42, 7], [1, 2, 3, 4, 5, 6, 7, 1]]
    classes = [
        SamplingParams(repetition_penalty=1.2, no_repeat_ngram_size=2, min_tokens=2),
        SamplingParams(temperature=0.8, seed=1),
        SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=2),
        SamplingParams(temperature=0.8, top_p=0.9, seed=3),
    ]
    setups = (  # the GPU's dtype and float32, rows and planned pages
        ("eagle", torch.bfloat16, {"kv": "rows"}),
        ("ngram", torch.float32, {"kv": "paged", "page_size": 4, "kv_schedule": "planned"}),
    )
    for draft, dtype, kv in setups:
        # the model's Triton kernels (attention on the setup's cache, matmul) with the first class; the other
        # classes would launch the same ones again, so they run the model in torch on a row cache (the recorded
        # variants are the same, and the interpreter takes a fraction of the time)
        for model_kernels, sampled in (
            ({"attention": "triton", "matmul": "triton", **kv}, classes[:1]),
            ({}, classes[1:]),
        ):
            target, head = build("tiny", draft=draft, dtype=dtype, num_layers=1, **model_kernels)
            dec = SpecDecoder.for_example(
                target, head, num_draft_tokens=3, max_batch=3, penalties=True, logprobs=2, eos_token_id=1,
                prefill_chunk=4,
            )  # fmt: skip
            for params in sampled:
                dec.generate(prompts, max_new_tokens=3, sampling=params)
    _direct_calls()


def _direct_calls() -> None:
    """The launch paths a small decode does not take: one-launch greedy verify, the two-launch tail, a
    verify of more rows than one launch serves, log-probabilities without alternatives, in 16-bit dtypes."""
    from stepgraph.kernels.draft_extend_tail import argmax_rows, draft_extend_tail
    from stepgraph.kernels.greedy_verify import greedy_chain_verify
    from stepgraph.kernels.logprobs import token_logprobs

    for dtype in (torch.bfloat16, torch.float16):
        for B in (2, 20):  # 20 x 4 rows: past the one-launch limit
            logits = torch.randn(B, 4, 300).to(dtype)
            drafts = torch.randint(0, 300, (B, 3))
            greedy_chain_verify(logits, drafts, torch.full((B,), 5), workspace=torch.zeros(B, dtype=torch.int32))
        rows = torch.randn(6, 300).to(dtype)
        draft_extend_tail(rows, torch.randn(6, 16).to(dtype), torch.tensor([0, 5, 2]))
        argmax_rows(rows, workspace=torch.zeros(6, dtype=torch.int32))
        token_logprobs(rows.view(2, 3, 300), torch.zeros(2, 3, dtype=torch.int64), 0)  # no alternatives


def compile_all(path: str) -> None:
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    failures = []
    entries = json.loads(Path(path).read_text())
    for e in entries:
        fn = getattr(importlib.import_module(e["module"]), e["name"])
        names = fn.arg_names
        sig = {n: e["sig"].get(n, "constexpr") for n in names if n in e["sig"] or n in e["constexprs"]}
        consts = {(names.index(n),): v for n, v in e["constexprs"].items()}
        try:
            src = ASTSource(fn=fn, signature=sig, constexprs=consts)
            triton.compile(src, target=GPUTarget("cuda", 90, 32), options=e["options"])
        except Exception as exc:  # noqa: BLE001 - every failure is reported
            failures.append(f"{e['module']}.{e['name']} {e['constexprs']}: {type(exc).__name__}: {exc}"[:2000])
    print(f"compiled {len(entries) - len(failures)} of {len(entries)} variants")
    for f in failures:
        print("FAILED", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    {"record": record, "compile": compile_all}[sys.argv[1]](sys.argv[2])
