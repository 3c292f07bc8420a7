#!/bin/bash
# top-k alone rows jumping by their counts (branch) against main, then the sampling GPU tests on the branch
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
K=stepgraph/kernels
cp $K/_sampling_pivot.py /tmp/new_sp.py; cp $K/chain_sampling_ref.py /tmp/new_ref.py
timeout 170 python3 _probe/ab.py --label new > $OUT/new.log 2>&1; echo "new rc=$?"
cp _probe/_sampling_pivot_main.py $K/_sampling_pivot.py; cp _probe/chain_sampling_ref_main.py $K/chain_sampling_ref.py
timeout 170 python3 _probe/ab.py --label main > $OUT/main.log 2>&1; echo "main rc=$?"
cp /tmp/new_sp.py $K/_sampling_pivot.py; cp /tmp/new_ref.py $K/chain_sampling_ref.py
paste -d'\n' $OUT/main.log $OUT/new.log | grep -v Warn | cut -c1-200
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_sampling_contract.py > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests.log
