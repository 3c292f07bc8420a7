# Call 1: the penalty and prompt-lookup GPU tests on the committed code (run 49 ran out of time before the
# last two), then the cost of penalties in the step with penalties on the draft's proposals.
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 170 python3 -m pytest -q tests/gpu/test_gpu_penalties.py tests/gpu/test_gpu_prompt_lookup.py 2>&1 | tail -3 \
  | tee $OUT/tests_penalties.log
timeout 330 python3 benchmarks/bench_penalties.py --batches 1,8 --rounds 1 --tokens 32 --out $OUT/penalties 2>&1 \
  | grep -v Warn | tail -12
