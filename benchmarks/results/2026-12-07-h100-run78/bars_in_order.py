import re, sys
nv = sys.argv[1]; lo = int(sys.argv[2], 16); hi = int(sys.argv[3], 16)
cur = None; last_sg = None; out = []
for l in open(nv):
    m = re.match(r'\s*//## File "(.*)", line (\d+)', l)
    if m:
        cur = (m.group(1).split('/')[-1], int(m.group(2)))
        if 'standard' not in cur[0] and 'core' not in cur[0]: last_sg = cur
        continue
    m = re.match(r'\s*/\*([0-9a-f]{4,})\*/\s+(.*?);', l)
    if m:
        a = int(m.group(1), 16)
        if lo <= a < hi and re.search(r'BAR.SYNC|ATOMG|BRA|EXIT|LDG|STG|CALL', m.group(2)):
            out.append(f"{a:06x} {m.group(2)[:60]:60s} {last_sg[0]}:{last_sg[1]} ({cur[0]}:{cur[1]})")
print("\n".join(out))
