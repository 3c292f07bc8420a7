#!/bin/bash
# per launch: top-k 2000 alone and top-p 0.5 over flat rows, main and branch
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
K=stepgraph/kernels
for f in _sampling_filter _sampling_mass _sampling_pivot; do cp $K/$f.py /tmp/new_$f.py; done
swap() { for f in _sampling_filter _sampling_mass _sampling_pivot; do cp $1$f$2 $K/$f.py; done; }
for v in main new; do
  if [ $v = main ]; then swap _probe/ _main.py; else swap /tmp/new_ .py; fi
  timeout 60 python3 _probe/launches.py $v 2000 1.0 early > $OUT/k2000_$v.log 2>&1
  timeout 60 python3 _probe/launches.py $v 0 0.5 early > $OUT/p05_$v.log 2>&1
done
cat $OUT/k2000_main.log $OUT/k2000_new.log $OUT/p05_main.log $OUT/p05_new.log | grep -v Warn | grep B= | cut -c1-600
