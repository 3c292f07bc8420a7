"""Helper of ``test_kernels_compile_for_the_gpu.py``, run in subprocesses.

``record OUT``: decode through every kind of kernel in Triton's interpreter (CPU), recording each launch's
kernel, argument types and constexprs into OUT (JSON). ``compile IN``: compile each recorded variant for
a CUDA target (sm_90) with Triton's compiler, no GPU needed, and print the ones that fail.

``sass IN OUT_DIR [--kernel NAME] [--set NAME=VALUE ...]``: compile the recorded variants of ``NAME`` (every
kernel without it), with constexprs set as given (a GPU run's tile sizes, say: the recording is a tiny
decode's), write each one's SASS to ``OUT_DIR``, and print its registers, stack (spills) and every loop of its
SASS: instructions, local loads and stores, global loads and stores, barriers, shuffles, float64 adds. A
kernel's cost at a glance, without a GPU::

    TRITON_INTERPRET=1 python tests/kernels/gpu_compile_check.py record /tmp/rec.json
    python tests/kernels/gpu_compile_check.py sass /tmp/rec.json /tmp/sass --kernel _round_kernel --set NS_P2=8
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
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


def _divisible_by_16(value) -> bool:
    """Whether Triton's launcher would tell the compiler an argument is a multiple of 16 (a pointer 16-byte
    aligned, an integer divisible by 16), where the argument does not opt out (:func:`_compiled` checks)."""
    if isinstance(value, torch.Tensor):
        return value.data_ptr() % 16 == 0
    return isinstance(value, int) and not isinstance(value, bool) and value % 16 == 0


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
        sig, consts, div16 = {}, {}, []
        for name in names:
            if name not in bound:
                continue  # a default: the compiler takes it
            value = bound[name]
            kind = None if name in constexprs else _type_of(value)
            if kind is None:
                consts[name] = value if isinstance(value, (int, float, bool, str, type(None))) else str(value)
                continue
            sig[name] = kind
            if _divisible_by_16(value):
                div16.append(name)
        options = {k: v for k, v in kwargs.items() if k in OPTIONS}
        entry = {"module": fn.__module__, "name": fn.__name__, "sig": sig, "constexprs": consts, "options": options,
                 "div16": div16}  # fmt: skip
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
        SamplingParams(
            repetition_penalty=1.2,
            no_repeat_ngram_size=2,
            min_tokens=2,
            logit_bias={5: 1.5, 9: -2.0},
            bad_words_ids=[[17, 3], [8]],
        ),
        SamplingParams(temperature=0.8, seed=1),
        SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=2),
        SamplingParams(temperature=0.8, top_p=0.9, seed=3),
        SamplingParams(temperature=0.8, top_k=2000, top_p=0.9, seed=4),  # the general class
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


#: Constexprs a launch on an sm_90 GPU sets where the interpreter's recording cannot: a dependent launch's wait
#: (:func:`stepgraph.kernels._common.dependent_launch`).
ON_THE_GPU = {"GDC": True}


def _compiled(entry: dict, overrides: dict | None = None):
    """``entry``'s variant compiled for sm_90 (constexprs in :data:`ON_THE_GPU`, then in ``overrides``,
    replaced), with the divisibility by 16 the launcher would have given its arguments."""
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(importlib.import_module(entry["module"]), entry["name"])
    names = fn.arg_names
    overrides = ON_THE_GPU | (overrides or {})
    constexprs = entry["constexprs"] | {n: v for n, v in overrides.items() if n in entry["constexprs"]}
    sig = {n: entry["sig"].get(n, "constexpr") for n in names if n in entry["sig"] or n in constexprs}
    consts = {(names.index(n),): v for n, v in constexprs.items()}
    div16 = set(entry.get("div16", ()))
    attrs = {
        (i,): [["tt.divisibility", 16]]
        for i, p in enumerate(fn.params)
        if p.name in div16 and not (p.do_not_specialize or p.do_not_specialize_on_alignment)
    }
    src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=entry["options"])


def compile_all(path: str) -> None:
    failures = []
    entries = json.loads(Path(path).read_text())
    for e in entries:
        try:
            _compiled(e)
        except Exception as exc:  # noqa: BLE001 - every failure is reported
            failures.append(f"{e['module']}.{e['name']} {e['constexprs']}: {type(exc).__name__}: {exc}"[:2000])
    print(f"compiled {len(entries) - len(failures)} of {len(entries)} variants")
    for f in failures:
        print("FAILED", f)
    sys.exit(1 if failures else 0)


#: What :func:`sass_loops` counts in a loop: SASS opcodes (a prefix of the instruction's opcode).
COUNTED = {"ldl/stl": ("LDL", "STL"), "ldg": ("LDG",), "stg": ("STG",), "bar": ("BAR",), "shfl": ("SHFL",),
           "dadd": ("DADD", "DFMA")}  # fmt: skip
_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRANCH = re.compile(r"\bBRA\b.*?0x([0-9a-f]+)")


def sass_loops(sass: str) -> list[dict]:
    """Every loop of one function's SASS (``cuobjdump -sass``): a branch back and the instructions from its
    target to it, as ``{"start", "end", "instructions", "ldl/stl", "ldg", ...}`` in address order."""
    code = [(int(m.group(1), 16), m.group(2)) for m in _INSTRUCTION.finditer(sass)]
    where = {address: i for i, (address, _) in enumerate(code)}
    loops = []
    for i, (address, text) in enumerate(code):
        branch = _BRANCH.search(text)
        target = int(branch.group(1), 16) if branch else None
        if target is None or target >= address or target not in where:
            continue  # not a branch back (a branch to itself ends every function)
        body = [t.split()[1] if t.startswith("@") else t.split()[0] for _, t in code[where[target] : i + 1]]
        loop = {"start": target, "end": address, "instructions": len(body)}
        for name, opcodes in COUNTED.items():
            loop[name] = sum(op.startswith(opcodes) for op in body)
        loops.append(loop)
    return sorted(loops, key=lambda loop: loop["start"])


def sass_report(path: str, out_dir: str, kernel: str | None = None, overrides: dict | None = None) -> str:
    """The report of ``sass`` mode (above) for the variants of ``kernel`` recorded in ``path``; each variant's
    SASS is written to ``out_dir/<kernel>-<i>.sass``."""
    from triton.backends.nvidia import compiler

    tools = Path(compiler.__file__).with_name("bin")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    chosen = [e for e in json.loads(Path(path).read_text()) if kernel in (None, e["name"])]
    if not chosen:
        raise SystemExit(f"no recorded variant of {kernel!r} in {path}")
    unknown = set(overrides or {}) - {n for e in chosen for n in e["constexprs"]}
    if unknown:
        raise SystemExit(f"--set {', '.join(sorted(unknown))}: not a constexpr of the variants chosen")
    for i, e in enumerate(chosen):
        cubin = out / f"{e['name']}-{i}.cubin"
        cubin.write_bytes(_compiled(e, overrides).asm["cubin"])
        sass = subprocess.run([tools / "cuobjdump", "-sass", cubin], capture_output=True, text=True, check=True).stdout
        usage = subprocess.run([tools / "cuobjdump", "-res-usage", cubin], capture_output=True, text=True, check=True)
        (out / f"{e['name']}-{i}.sass").write_text(sass)
        regs = re.search(r"REG:(\d+)", usage.stdout)
        stack = re.search(r"STACK:(\d+)", usage.stdout)
        shown = {n: v for n, v in e["constexprs"].items() if isinstance(v, int) and not isinstance(v, bool)}
        lines.append(f"{e['name']}-{i}: registers {regs.group(1) if regs else '?'}, stack {stack.group(1) if stack else '?'}"
                     f" bytes; {shown | {n: v for n, v in (overrides or {}).items() if n in e['constexprs']}}")  # fmt: skip
        for loop in sass_loops(sass):
            counts = " ".join(f"{name} {loop[name]:3d}" for name in COUNTED)
            lines.append(
                f"  loop 0x{loop['start']:05x}-0x{loop['end']:05x}: {loop['instructions']:5d} instructions, {counts}"
            )
    return "\n".join(lines)


def _sass_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="gpu_compile_check.py sass", description=sass_report.__doc__)
    ap.add_argument("recording")
    ap.add_argument("out_dir")
    ap.add_argument("--kernel", help="one kernel's variants (its function name); every kernel without it")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="an integer constexpr's value")
    args = ap.parse_args(argv)
    overrides = {}
    for item in args.set:
        name, _, value = item.partition("=")
        if not value.lstrip("-").isdigit():
            raise SystemExit(f"--set {item!r}: give NAME=VALUE with an integer VALUE")
        overrides[name] = int(value)
    print(sass_report(args.recording, args.out_dir, args.kernel, overrides))


if __name__ == "__main__":
    if sys.argv[1] == "sass":
        _sass_main(sys.argv[2:])
    else:
        {"record": record, "compile": compile_all}[sys.argv[1]](sys.argv[2])
