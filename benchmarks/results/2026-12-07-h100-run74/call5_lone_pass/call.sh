#!/bin/bash
# the lone pass a thread a sub-block (lone) against main's (a warp a sub-block, tile by tile): per instance; then
# the sampling contract tests on lone
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
P=stepgraph/kernels/_sampling_pivot.py
ONLY="k2000 alone s1,top-p 0.5 s1,top-p 0.9 s1"
timeout 45 python3 _probe/ab.py --label lone --batches 1,8,64 --only "$ONLY" > $OUT/lone.log 2>&1; echo "lone rc=$?"
timeout 25 python3 _probe/ab.py --label loneL5 --launches 5 --batches 8,64 --only "k2000 alone s1" > $OUT/lone_L5.log 2>&1
cp _probe/_sampling_pivot_main.py $P
timeout 45 python3 _probe/ab.py --label main --batches 1,8,64 --only "$ONLY" > $OUT/main.log 2>&1; echo "main rc=$?"
cp _probe/_sampling_pivot_lone.py $P
paste -d'\n' $OUT/main.log $OUT/lone.log | grep -v Warn | cut -c1-200; grep -v Warn $OUT/lone_L5.log | cut -c1-200
timeout 100 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_gpu_sampling_contract.py > $OUT/tests_contract.log 2>&1; echo "contract rc=$?"; tail -1 $OUT/tests_contract.log
