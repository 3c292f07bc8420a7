python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 230 python3 -m pytest -q tests/kernels/test_pivot_sampling.py tests/kernels/test_extreme_temperatures.py \
  tests/gpu/test_gpu_sampling_contract.py 2>&1 | tail -4 | tee $OUT/tests.log
R=benchmarks/results/2026-12-04-h200-run50
for v in after before; do
  P=""; [ $v = before ] && P=$PWD/_before
  timeout 65 env PYTHONPATH=$P PROBE_TARGET=1056 python3 $R/probe_top_p.py $v 2>&1 | grep -v -i warn | tee -a $OUT/top_p.log
done
timeout 70 python3 benchmarks/results/2026-12-04-h200-run51/probe_general.py after 2>&1 | grep -v -i "warn" | tee -a $OUT/general.log
