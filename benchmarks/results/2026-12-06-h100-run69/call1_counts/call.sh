#!/bin/bash
# GPU tests on the new code; then µs per instance (per launch at B <= 8): new, main's two files, new + hoisted first load
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
K=stepgraph/kernels
timeout 170 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_logprobs.py tests/gpu/test_gpu_sampling_contract.py > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests.log
cp $K/_sampling_filter.py /tmp/new_sf.py; cp $K/chain_sampling.py /tmp/new_cs.py; cp $K/_sampling_mass.py /tmp/new_sm.py
timeout 120 python3 _probe/ab.py --label new --launches --batches 1,8,32 > $OUT/new.log 2>&1; echo "new rc=$?"
cp _probe/_sampling_filter_main.py $K/_sampling_filter.py; cp _probe/chain_sampling_main.py $K/chain_sampling.py
timeout 130 python3 _probe/ab.py --label main --launches --batches 1,8,32 > $OUT/main.log 2>&1; echo "main rc=$?"
cp /tmp/new_sf.py $K/_sampling_filter.py; cp /tmp/new_cs.py $K/chain_sampling.py; cp _probe/_sampling_mass_hoist.py $K/_sampling_mass.py
timeout 120 python3 _probe/ab.py --label hoist --launches --batches 1,8,32 > $OUT/hoist.log 2>&1; echo "hoist rc=$?"
cp /tmp/new_sm.py $K/_sampling_mass.py
paste -d'\n' $OUT/main.log $OUT/new.log $OUT/hoist.log | cut -c1-100
