# Call 1: GPU tests of the first draw in the stats launch, then before (HEAD's package in _before/) and after.
set -x
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
R=benchmarks/results
python3 -c "import stepgraph; print(stepgraph.__file__)"
PYTHONPATH=$PWD/_before python3 -c "import stepgraph; print(stepgraph.__file__)"
timeout 200 python3 -m pytest -q -x tests/kernels/test_pivot_sampling.py tests/gpu/test_gpu_sampling_contract.py \
  2>&1 | tail -15 | tee $OUT/tests.log
python3 $R/2026-12-03-h200-run47/probe_regs.py new 2>&1 | tail -6 | tee $OUT/regs.log
for i in 1 2; do
  PYTHONPATH=$PWD/_before python3 $R/2026-12-03-h200-run46/probe_pivot.py prev 2>&1 | grep us | tee -a $OUT/pivot.log
  python3 $R/2026-12-03-h200-run46/probe_pivot.py new 2>&1 | grep us | tee -a $OUT/pivot.log
done
python3 $R/2026-12-03-h200-run45/probe_launches.py 1,8,64 2>&1 | grep -v Warn | tee $OUT/launches.log | tail -80
