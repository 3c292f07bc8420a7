#!/bin/bash
# DRAW_LAUNCHES = 6: the sampling contract's GPU tests, then every sampled-verify case over flat rows
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_sampling_contract.py > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests.log
timeout 250 python3 benchmarks/bench_kernels.py --only sampling --out $OUT/scale1 > $OUT/scale1.log 2>&1; echo "s1 rc=$?"
grep -h "sampled verify" $OUT/scale1/kernels.md | cut -d'|' -f2,5 | sed 's/sampled verify //'
