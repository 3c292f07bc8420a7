#!/bin/bash
# DRAW_LAUNCHES 5 / 6 / 7 / 8 (the alone pass as on main): per instance; then GPU tests with the new default (7)
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
ONLY="k2000 alone s1,k2000 alone s4,top-p 0.9 s1,top-p 0.5 s1,top-p 0.5 s4,k1000 alone s0.6"
for n in 5 7 6 8; do
  timeout 80 python3 _probe/ab.py --label L$n --launches $n --batches 1,8,64 --only "$ONLY" > $OUT/L$n.log 2>&1; echo "L$n rc=$?"
done
paste -d'\n' $OUT/L5.log $OUT/L6.log $OUT/L7.log $OUT/L8.log | grep -v Warn | cut -c1-200
timeout 170 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_gpu_sampling_contract.py > $OUT/tests_contract.log 2>&1; echo "contract rc=$?"; tail -1 $OUT/tests_contract.log
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_gpu_kernels.py -k "dependent or top or sampl or cut or list" > $OUT/tests_kernels.log 2>&1; echo "kernels rc=$?"; tail -1 $OUT/tests_kernels.log
