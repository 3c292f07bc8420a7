#!/bin/bash
# The split layout: main against the branch (probe), then the branch's sampling GPU tests.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 170 python3 _probe/layout.py > $OUT/layout.log 2>&1; echo "probe rc=$?"
grep -v Warn $OUT/layout.log
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_gpu_sampling_contract.py > $OUT/tests_contract.log 2>&1; echo "contract rc=$?"
tail -1 $OUT/tests_contract.log
timeout 140 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_gpu_kernels.py -k "dependent or top or sampl or cut or list" > $OUT/tests_kernels.log 2>&1; echo "kernels rc=$?"
tail -1 $OUT/tests_kernels.log
