#!/bin/bash
# the sampling GPU tests on v4 (the committed tree), then the by-cut class's own cases (min-p alone; top-k 50 + top-p), main and v4
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_sampling_contract.py > $OUT/tests_contract.log 2>&1; echo "contract rc=$?"; tail -2 $OUT/tests_contract.log
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_kernels.py -k "dependent or top or sampl or cut or list" > $OUT/tests_kernels.log 2>&1; echo "kernels rc=$?"; tail -2 $OUT/tests_kernels.log
K=stepgraph/kernels
swap() { for f in _sampling_filter _sampling_mass _sampling_pivot; do cp _probe/${f}_$1.py $K/$f.py; done; }
for v in main v4; do
  swap $v
  timeout 40 python3 _probe/ab.py --label $v --batches 1,8,64 --only "min-p,k50" > $OUT/bycut_$v.log 2>&1; echo "$v rc=$?"
done
paste -d'\n' $OUT/bycut_main.log $OUT/bycut_v4.log | grep -v Warn | cut -c1-200
