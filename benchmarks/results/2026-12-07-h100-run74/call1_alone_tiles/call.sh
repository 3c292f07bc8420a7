#!/bin/bash
# ALONE_TILES (tiles a step of a pass by one program alone) and DRAW_LAUNCHES: per instance, then per launch; then
# the sampling contract tests on the working tree (ALONE_TILES = 4)
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
ONLY="k2000 alone s1,k2000 alone s4,top-p 0.9 s1,top-p 0.5 s1,top-p 0.9 s4"
for v in "1 5" "4 5" "4 4" "4 7"; do set -- $v
  ALONE=$1 timeout 90 python3 _probe/ab.py --label A$1L$2 --launches $2 --batches 1,8,64 --only "$ONLY" > $OUT/A$1L$2.log 2>&1; echo "A$1L$2 rc=$?"
done
paste -d'\n' $OUT/A1L5.log $OUT/A4L5.log $OUT/A4L4.log $OUT/A4L7.log | grep -v Warn | cut -c1-200
for a in 1 4 8; do
  ALONE=$a timeout 30 python3 _probe/launches.py A$a 2000 1.0 early 2>&1 | grep B= | cut -c1-600
done
timeout 170 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_gpu_sampling_contract.py > $OUT/tests_contract.log 2>&1; echo "contract rc=$?"; tail -2 $OUT/tests_contract.log
