"""Registers and shared memory of a recorded kernel's sm_90 build: occ.py REC.json k=v ..."""
import sys, json, re, subprocess
from pathlib import Path
sys.path.insert(0, "tests/kernels"); sys.path.insert(0, ".")
import gpu_compile_check as g
from triton.backends.nvidia import compiler
e = json.loads(Path(sys.argv[1]).read_text())[0]
ov = {k: int(v) for k, v in (a.split("=") for a in sys.argv[2:])}
c = g._compiled(e, ov)
Path("/tmp/occ.cubin").write_bytes(c.asm["cubin"])
tools = Path(compiler.__file__).with_name("bin")
u = subprocess.run([tools / "cuobjdump", "-res-usage", "/tmp/occ.cubin"], capture_output=True, text=True).stdout
print("shared(dyn)", c.metadata.shared, "warps", c.metadata.num_warps, re.findall(r"(REG:\d+|STACK:\d+|SHARED:\d+|LOCAL:\d+)", u))
