# Call 2: the committed kernels (lists of up to SMALL_LIST entries gathered at once, longer ones a split at a
# time; the small top-k rows' samples drawn in the cut launch): the sampling kernels' GPU tests, then
# probe_lists.py beside HEAD before the change (_before/), and the per-launch times.
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
R=benchmarks/results/2026-12-04-h200-run49
timeout 330 python3 -m pytest -q -x tests/kernels/test_chain_sampling.py tests/kernels/test_pivot_sampling.py \
  tests/kernels/test_logprobs.py tests/gpu/test_gpu_sampling_contract.py 2>&1 | tail -3 | tee $OUT/tests.log
PYTHONPATH=$PWD/_before timeout 70 python3 $R/probe_lists.py prev 2>&1 | grep " us\|Error" | tee -a $OUT/lists.log
timeout 70 python3 $R/probe_lists.py now 2>&1 | grep "us\|regs\|Error" | tee -a $OUT/lists.log
timeout 40 python3 $R/probe_launches.py now 1,8 2>&1 | grep -v Warn | tee -a $OUT/launches.log
