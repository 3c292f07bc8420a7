# Call 1: the sampling kernels' GPU tests on the working tree (lists gathered at once, the small top-k rows'
# samples drawn in the cut launch), then probe_lists.py for HEAD (_before/), the gathered lists alone (_varG/)
# and the working tree; per-launch times of HEAD and the working tree.
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
R=benchmarks/results/2026-12-04-h200-run49
timeout 200 python3 -m pytest -q -x tests/kernels/test_chain_sampling.py tests/kernels/test_pivot_sampling.py \
  tests/kernels/test_logprobs.py tests/gpu/test_gpu_sampling_contract.py 2>&1 | tail -3 | tee $OUT/tests.log
for v in _before:prev _varG:G stepgraph:now; do
  dir=${v%%:*}; label=${v##*:}
  if [ $dir = stepgraph ]; then pp=; else pp=$PWD/$dir; fi
  PYTHONPATH=$pp timeout 80 python3 $R/probe_lists.py $label 2>&1 | grep "us\|regs\|Error" | tee -a $OUT/lists.log
done
for v in _before:prev stepgraph:now; do
  dir=${v%%:*}; label=${v##*:}
  if [ $dir = stepgraph ]; then pp=; else pp=$PWD/$dir; fi
  PYTHONPATH=$pp timeout 60 python3 $R/probe_launches.py $label 1,8 2>&1 | grep -v Warn | tee -a $OUT/launches.log
done
