import re, sys
ins = []
for ln in open(sys.argv[1]):
    m = re.match(r'\s*/\*([0-9a-f]{4})\*/\s+(.*?)\s*;', ln)
    if m:
        ins.append((int(m.group(1), 16), m.group(2)))
addr_idx = {a: i for i, (a, _) in enumerate(ins)}
loops = []
for i, (a, t) in enumerate(ins):
    m = re.search(r'BRA\s+(?:`\()?0x([0-9a-f]+)', t)
    if m:
        tgt = int(m.group(1), 16)
        if tgt <= a and tgt in addr_idx:
            s = addr_idx[tgt]
            body = [b for _, b in ins[s:i + 1]]
            c = lambda key: sum(key in b for b in body)
            loops.append((tgt, a, len(body), c('LDL') + c('STL'), c('LDG'), c('STG'), c('BAR'), c('SHFL'), c('DADD') + c('DFMA')))
for l in sorted(loops, key=lambda x: x[0]):
    print("0x%05x-0x%05x len %5d ldl/stl %3d ldg %3d stg %3d bar %2d shfl %3d dadd %3d" % l)
