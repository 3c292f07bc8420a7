# Call 5: a top-k above 1024 without top-p drawn by the pivot (the working tree) against HEAD before it
# (_before/: 792567f, the package before it): GPU tests, probe_topk_pivot.py (one round: the device time left).
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
R=benchmarks/results/2026-12-03-h200-run47
timeout 120 python3 -m pytest -q -x tests/kernels/test_pivot_sampling.py tests/gpu/test_gpu_sampling_contract.py \
  2>&1 | tail -3 | tee $OUT/tests.log
for round in 1; do
  python3 $R/probe_topk_pivot.py pivot 2>&1 | grep "us\|Error" | tee -a $OUT/topk.log
  PYTHONPATH=$PWD/_before python3 $R/probe_topk_pivot.py prev 2>&1 | grep "us\|Error" | tee -a $OUT/topk.log
done
