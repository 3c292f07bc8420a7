#!/bin/bash
# LATE_STEPS 5 (main) against 4 for the general class; then the sampling GPU tests on the committed code
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
for L in 5 4 5 4; do
  LATE_STEPS=$L timeout 60 python3 _probe/ab.py --label L$L --batches 1,8,64 --only general 2>&1 | grep B= > $OUT/late_$L.$RANDOM.log
done
for f in $OUT/late_*.log; do echo "== $f"; cat $f; done
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_gpu_sampling_contract.py > $OUT/tests_contract.log 2>&1; echo "contract rc=$?"; tail -1 $OUT/tests_contract.log
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_gpu_kernels.py -k "dependent or top or sampl or cut or list" > $OUT/tests_kernels.log 2>&1; echo "kernels rc=$?"; tail -1 $OUT/tests_kernels.log
