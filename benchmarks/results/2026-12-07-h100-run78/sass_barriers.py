"""Barriers in a kernel's sm_90 build, from `nvdisasm -g -c` output (its line table):
`sass_barriers.py NV --by-line`: BAR.SYNC counted by the last stepgraph line before each;
`sass_barriers.py NV LO HI`: BAR.SYNC, global loads, stores and atomics between two addresses (hex), in order."""
import collections
import re
import sys

nv = sys.argv[1]
lo, hi = (int(sys.argv[2], 16), int(sys.argv[3], 16)) if sys.argv[2] != "--by-line" else (0, 1 << 40)
cur = last = None
bars, out = collections.Counter(), []
for line in open(nv):
    m = re.match(r'\s*//## File "(.*)", line (\d+)', line)
    if m:
        cur = (m.group(1).split("/")[-1], int(m.group(2)))
        if "standard" not in cur[0] and "core" not in cur[0]:
            last = cur  # the caller of Triton's own reductions
        continue
    m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
    if not m or not lo <= int(m.group(1), 16) < hi:
        continue
    if "BAR.SYNC" in m.group(2):
        bars[f"{last[0]}:{last[1]}"] += 1
    if re.search(r"BAR.SYNC|ATOMG|LDG|STG", m.group(2)):
        out.append(f"{m.group(1)} {m.group(2)[:50]:50s} {last[0]}:{last[1]}")
if sys.argv[2] == "--by-line":
    for where, n in sorted(bars.items(), key=lambda kv: (kv[0].split(":")[0], int(kv[0].split(":")[1]))):
        print(f"{n:4d} {where}")
else:
    print("\n".join(out))
