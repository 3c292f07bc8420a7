import re, sys, collections
nv = sys.argv[1]
cur = None; last_sg = None
bars = collections.Counter()
for l in open(nv):
    m = re.match(r'\s*//## File "(.*)", line (\d+)', l)
    if m:
        cur = (m.group(1).split('/')[-1], int(m.group(2)))
        if 'standard' not in cur[0] and 'core' not in cur[0]: last_sg = cur
        continue
    m = re.match(r'\s*/\*([0-9a-f]{4,})\*/\s+(.*?);', l)
    if m and 'BAR.SYNC' in m.group(2):
        bars[f"{last_sg[0]}:{last_sg[1]}"] += 1
for k, v in sorted(bars.items(), key=lambda kv: (kv[0].split(':')[0], int(kv[0].split(':')[1]))): print(f"{v:4d} {k}")
