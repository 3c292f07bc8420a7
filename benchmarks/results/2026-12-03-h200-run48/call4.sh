# Call 4: the committed code (B of call 2: the bound in round 0, the lists in round 1, the cut in a launch of its
# own). GPU tests of the sampling kernels, registers, probe_mixed.py beside HEAD before the change (_before/),
# bench_kernels.py --only sampling.
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
R=benchmarks/results/2026-12-03-h200-run48
timeout 290 python3 -m pytest -q -x tests/kernels/test_pivot_sampling.py tests/gpu/test_gpu_sampling_contract.py \
  tests/kernels/test_chain_sampling.py 2>&1 | tail -4 | tee $OUT/tests.log
python3 $R/probe_regs.py final 2>&1 | tail -6 | tee $OUT/regs.log
PYTHONPATH=$PWD/_before timeout 80 python3 $R/probe_mixed.py prev 2>&1 | grep "us\|Error" | tee -a $OUT/mixed.log
timeout 80 python3 $R/probe_mixed.py final 2>&1 | grep "us\|Error" | tee -a $OUT/mixed.log
timeout 140 python3 benchmarks/bench_kernels.py --only sampling --out $OUT/kernels 2>&1 | tail -3
