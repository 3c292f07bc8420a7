python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
for v in head ptx; do
  P=""; case $v in head*) P=$PWD/_before;; esac
  timeout 90 env PYTHONPATH=$P python3 benchmarks/results/2026-12-04-h200-run52/probe_general.py $v 2>&1 | grep -v -i warn | tee -a $OUT/general.log | grep -v "^ "
done
timeout 200 python3 -m pytest -q -x tests/kernels/test_pivot_sampling.py tests/gpu/test_gpu_sampling_contract.py 2>&1 | tee $OUT/tests.log | tail -3
