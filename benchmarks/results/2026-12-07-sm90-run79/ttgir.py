"""The TTGIR of a recorded variant (its tensors' layouts: which dimensions lie in a thread, a warp's lanes, the
warps), with constexprs set as given. From the repository root:
`python ttgir.py ONE.json OUT.ttgir NS_P2=8 PIVOT_NB_P2=128 LIST_M=512`."""
import json
import sys

sys.path[:0] = ["tests/kernels", "."]
import gpu_compile_check as g  # noqa: E402

entry = json.load(open(sys.argv[1]))[0]
sets = dict(kv.split("=") for kv in sys.argv[3:])
overrides = {k: int(v) if v.lstrip("-").isdigit() else v for k, v in sets.items()}
open(sys.argv[2], "w").write(g._compiled(entry, overrides).asm["ttgir"])
