# Call 3: the first draw's split masses in chunks of 16 sub-blocks (the working tree, as `chunk/`): registers,
# GPU tests, probe_pivot beside HEAD before the change (_before/), launches at B = 8 and 64.
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
R=benchmarks/results/2026-12-03-h200-run47
python3 $R/probe_regs.py chunk 2>&1 | tail -6 | tee $OUT/regs.log
for round in 1 2; do
  PYTHONPATH=$PWD/_before python3 benchmarks/results/2026-12-03-h200-run46/probe_pivot.py prev 2>&1 | grep us | tee -a $OUT/pivot.log
  python3 benchmarks/results/2026-12-03-h200-run46/probe_pivot.py chunk 2>&1 | grep "us\|Error" | tee -a $OUT/pivot.log
done
python3 benchmarks/results/2026-12-03-h200-run45/probe_launches.py 1,8,64 2>&1 | grep -v Warn | grep -A14 "top-p 0" | tee $OUT/launches.log | tail -3
timeout 200 python3 -m pytest -q -x tests/kernels/test_pivot_sampling.py tests/gpu/test_gpu_sampling_contract.py \
  2>&1 | tail -4 | tee $OUT/tests.log
