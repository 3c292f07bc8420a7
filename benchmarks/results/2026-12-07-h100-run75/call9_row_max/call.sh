#!/bin/bash
# A/B: m stored once a row (new) against 80cd890 (main), then the sampling contract tests on new
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
ONLY="top-p 0.5 s1,k2000 alone s1,general k2000+p s1,top-p 0.9 s1"
K=stepgraph/kernels
for v in new main; do
  cp _probe/pivot_$v.py $K/_sampling_pivot.py; cp _probe/mass_$v.py $K/_sampling_mass.py
  timeout 50 python3 _probe/ab.py --label $v --batches 1,8,64 --only "$ONLY" 2>&1 | grep B= | tee $OUT/ab_$v.log
done
cp _probe/pivot_new.py $K/_sampling_pivot.py; cp _probe/mass_new.py $K/_sampling_mass.py
timeout 110 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_gpu_sampling_contract.py > $OUT/tests_contract.log 2>&1; echo "contract rc=$?"; tail -1 $OUT/tests_contract.log
