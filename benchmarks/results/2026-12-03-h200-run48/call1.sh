# Call 1: small top-k rows find their cut inside the top_p class's rounds. GPU tests of the sampling kernels,
# registers, then probe_mixed.py beside HEAD before the change (_before/), twice, alternating.
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
R=benchmarks/results/2026-12-03-h200-run48
timeout 200 python3 -m pytest -q -x tests/kernels/test_pivot_sampling.py tests/kernels/test_chain_sampling.py \
  tests/gpu/test_gpu_sampling_contract.py 2>&1 | tail -4 | tee $OUT/tests.log
python3 $R/probe_regs.py now 2>&1 | tail -6 | tee $OUT/regs.log
for round in 1 2; do
  PYTHONPATH=$PWD/_before timeout 100 python3 $R/probe_mixed.py prev 2>&1 | grep "us\|Error" | tee -a $OUT/mixed.log
  timeout 100 python3 $R/probe_mixed.py now 2>&1 | grep "us\|Error" | tee -a $OUT/mixed.log
done
