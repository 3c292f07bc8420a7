# Call 4: the committed code (min-p rows draw first in the rounds, from min-p's set): GPU tests, registers,
# probe_pivot beside HEAD before the change (_before/), launches, bench_kernels --only sampling.
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
R=benchmarks/results/2026-12-03-h200-run47
timeout 170 python3 -m pytest -q -x tests/kernels/test_pivot_sampling.py tests/gpu/test_gpu_sampling_contract.py \
  tests/gpu/test_gpu_kernels.py -k "pivot or draws or top or sampl or distribution or logprob or first" 2>&1 | tail -4 | tee $OUT/tests.log
python3 $R/probe_regs.py final 2>&1 | tail -6 | tee $OUT/regs.log
for round in 1 2; do
  PYTHONPATH=$PWD/_before python3 benchmarks/results/2026-12-03-h200-run46/probe_pivot.py prev 2>&1 | grep us | tee -a $OUT/pivot.log
  python3 benchmarks/results/2026-12-03-h200-run46/probe_pivot.py final 2>&1 | grep "us\|Error" | tee -a $OUT/pivot.log
done
python3 benchmarks/results/2026-12-03-h200-run45/probe_launches.py 1,8,64 2>&1 | grep -v Warn | grep -A14 "top-p 0" > $OUT/launches.log
timeout 150 python3 benchmarks/bench_kernels.py --only sampling --out $OUT/kernels 2>&1 | tail -3
