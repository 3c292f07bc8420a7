"""Instructions by opcode between two addresses (hex) of `nvdisasm -g -c` output: `python ops.py NV LO HI`."""
import collections
import re
import sys

nv, lo, hi = sys.argv[1], int(sys.argv[2], 16), int(sys.argv[3], 16)
ops = collections.Counter()
for line in open(nv):
    m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", line)
    if m and lo <= int(m.group(1), 16) < hi:
        ops[m.group(2)] += 1
print(sum(ops.values()), ops.most_common(25))
