"""The round kernel's recorded variants (``gpu_compile_check.py record``) compiled for sm_90 with bfloat16
logits at a batch's layout: registers, stack, instructions, and the loops that store (the mass passes and the
pool's writer), instructions an iteration. From the repository's root (or a copy of the package, first on
``sys.path``)::

    TRITON_INTERPRET=1 PYTHONPATH=$PWD python tests/kernels/gpu_compile_check.py record rec.json
    python sass_round.py rec.json NS_P2 PIVOT_NB_P2 LIST_M   # B = 8: 32 32 128; B = 64: 8 128 512 (K = 3, V = 151,936)
"""

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))
from triton.backends.nvidia import compiler  # noqa: E402

from tests.kernels import gpu_compile_check as g  # noqa: E402

tools = Path(compiler.__file__).with_name("bin")
for e in json.loads(Path(sys.argv[1]).read_text()):
    if e["name"] != "_round_kernel":
        continue
    c = e["constexprs"]
    e["sig"]["logits_ptr"] = "*bf16"
    c |= {"SHIFT": 16, "NS_P2": int(sys.argv[2]), "PIVOT_NB_P2": int(sys.argv[3]), "LIST_M": int(sys.argv[4])}
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(g._compiled(e).asm["cubin"])
        sass = subprocess.run([tools / "cuobjdump", "-sass", cubin], capture_output=True, text=True).stdout
        use = subprocess.run([tools / "cuobjdump", "-res-usage", cubin], capture_output=True, text=True).stdout
    loops = [x["instructions"] for x in g.sass_loops(sass) if x["stg"] and x["instructions"] < 600]
    print(
        f"LATE={c.get('LATE', '-')} LATE_LAUNCH={c['LATE_LAUNCH']} POOL={c['PIVOT_POOL']} STEPS={c['PIVOT_STEPS']}",
        re.search(r"REG:\d+", use).group(0),
        re.search(r"STACK:\d+", use).group(0),
        "instructions",
        len(re.findall(r"/\*[0-9a-f]{4,}\*/", sass)),
        "loops that store",
        loops,
    )
