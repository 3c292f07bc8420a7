#!/bin/bash
# the late rows' draws from their pool by all their programs (branch) against main, then the sampling GPU tests
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
K=stepgraph/kernels
cp $K/_sampling_pivot.py /tmp/new_sp.py; cp $K/_sampling_mass.py /tmp/new_sm.py
timeout 150 python3 _probe/ab.py --label new --launches --batches 1,8,16,32 > $OUT/new.log 2>&1; echo "new rc=$?"
cp _probe/_sampling_pivot_main.py $K/_sampling_pivot.py; cp _probe/_sampling_mass_main.py $K/_sampling_mass.py
timeout 150 python3 _probe/ab.py --label main --launches --batches 1,8,16,32 > $OUT/main.log 2>&1; echo "main rc=$?"
cp /tmp/new_sp.py $K/_sampling_pivot.py; cp /tmp/new_sm.py $K/_sampling_mass.py
paste -d'\n' $OUT/main.log $OUT/new.log | grep -v Warn | cut -c1-250
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_sampling_contract.py > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests.log
