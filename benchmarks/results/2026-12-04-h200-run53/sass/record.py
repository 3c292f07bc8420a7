"""Record the round kernel's launch args (types, constexprs) under the interpreter: python record.py OUT.pkl"""
import os, pickle, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch
from stepgraph.kernels import _sampling_mass
from stepgraph.kernels.chain_sampling import chain_verify_sampling

rec = {}
orig = _sampling_mass._round_kernel

class Wrap:
    def __getitem__(self, grid):
        def call(*args, **kw):
            names = orig.arg_names
            sig = {}
            for n, a in zip(names, args):
                if isinstance(a, torch.Tensor):
                    sig[n] = "*" + {torch.bfloat16: "bf16", torch.float32: "fp32", torch.float64: "fp64", torch.int64: "i64", torch.int32: "i32", torch.float16: "fp16", torch.bool: "i1", torch.uint8: "u8"}[a.dtype]
                elif isinstance(a, bool):
                    sig[n] = "i1"
                elif isinstance(a, int):
                    sig[n] = "i32" if -2**31 <= a < 2**31 else "i64"
                elif isinstance(a, float):
                    sig[n] = "fp32"
            const = {k: v for k, v in kw.items() if k in names}
            opts = {k: v for k, v in kw.items() if k not in names}
            rec.setdefault("launch", (sig, const, opts))
            return orig[grid](*args, **kw)
        return call
_sampling_mass._round_kernel = Wrap()
B, K, V = 2, 3, 3001
x = torch.randn(B, K + 1, V).bfloat16()
d = torch.argmax(x, -1)[:, :K].contiguous()
chain_verify_sampling(x, d, torch.full((B,), 0.8), torch.full((B,), 2000), torch.full((B,), 0.9), torch.arange(B), torch.zeros(B, dtype=torch.int64), filtered=True, pivot=True)
pickle.dump(rec["launch"], open(sys.argv[1], "wb"))
print(rec["launch"][1], rec["launch"][2])
