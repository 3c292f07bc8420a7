#!/bin/bash
# the row's last program narrows (branch) against main: per instance, then per launch, then the sampling GPU tests
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
K=stepgraph/kernels
for f in _sampling_filter _sampling_mass _sampling_pivot; do cp $K/$f.py /tmp/new_$f.py; done
swap() { for f in _sampling_filter _sampling_mass _sampling_pivot; do cp $1$f$2 $K/$f.py; done; }
timeout 120 python3 _probe/ab.py --label new --batches 1,8,64 > $OUT/new.log 2>&1; echo "new rc=$?"
swap _probe/ _main.py
timeout 120 python3 _probe/ab.py --label main --batches 1,8,64 > $OUT/main.log 2>&1; echo "main rc=$?"
timeout 40 python3 _probe/launches.py main > $OUT/launches_main.log 2>&1
swap /tmp/new_ .py
timeout 40 python3 _probe/launches.py new > $OUT/launches_new.log 2>&1
paste -d'\n' $OUT/main.log $OUT/new.log | grep -v Warn | cut -c1-200
cat $OUT/launches_main.log $OUT/launches_new.log | grep -v Warn | cut -c1-700
