import json, sys, subprocess, re
from pathlib import Path
from tests.kernels import gpu_compile_check as g
from triton.backends.nvidia import compiler
rec, ns, nb, pool = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
e = [x for x in json.loads(Path(rec).read_text()) if x["name"] == "_round_kernel"][0]
e["sig"]["logits_ptr"] = "*bf16"
e["constexprs"] |= {"SHIFT": 16, "NS_P2": ns, "PIVOT_NB_P2": nb}
if pool != "-":
    e["constexprs"]["PIVOT_POOL"] = int(pool)
k = g._compiled(e)
tools = Path(compiler.__file__).with_name("bin")
cubin = Path(f"/tmp/round_{ns}_{pool}.cubin"); cubin.write_bytes(k.asm["cubin"])
sass = subprocess.run([tools / "cuobjdump", "-sass", cubin], capture_output=True, text=True).stdout
Path(f"/tmp/round_{ns}_{pool}.sass").write_text(sass)
usage = subprocess.run([tools / "cuobjdump", "-res-usage", cubin], capture_output=True, text=True).stdout
print(ns, pool, re.search(r"REG:\d+", usage).group(0), re.search(r"STACK:\d+", usage).group(0), "instr", len(re.findall(r"/\*[0-9a-f]{4,}\*/", sass)))
