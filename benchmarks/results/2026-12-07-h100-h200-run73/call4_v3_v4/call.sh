#!/bin/bash
# main, v3 (the row's last program narrows; no search code in the top_p class) and v4 (the stats launch stores the
# initial state too): per instance, then per launch of top-k 2000 alone and the general class
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
K=stepgraph/kernels
swap() { for f in _sampling_filter _sampling_mass _sampling_pivot; do cp _probe/${f}_$1.py $K/$f.py; done; }
for v in v4 main v3; do
  swap $v
  timeout 100 python3 _probe/ab.py --label $v --batches 1,8,64 > $OUT/$v.log 2>&1; echo "$v rc=$?"
  timeout 40 python3 _probe/launches.py $v 2000 1.0 early > $OUT/k2000_$v.log 2>&1
  timeout 40 python3 _probe/launches.py $v 2000 0.9 late > $OUT/general_$v.log 2>&1
done
swap v4
paste -d'\n' $OUT/main.log $OUT/v3.log $OUT/v4.log | grep -v Warn | cut -c1-200
cat $OUT/k2000_*.log $OUT/general_*.log | grep B= | cut -c1-600
