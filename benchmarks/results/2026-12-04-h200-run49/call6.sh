# Call 6: penalties on the draft's proposals (5a854b9): the penalty and prompt-lookup GPU tests, then the cost
# of penalties in the step (bench_penalties.py, B = 1 and 64, one round) as far as the time left allows.
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 75 python3 -m pytest -q -x tests/gpu/test_gpu_penalties.py tests/gpu/test_gpu_prompt_lookup.py 2>&1 | tail -2 \
  | tee $OUT/tests_penalties.log
timeout 70 python3 benchmarks/bench_penalties.py --batches 1,64 --rounds 1 --tokens 32 --out $OUT/penalties 2>&1 \
  | grep -v Warn | tail -8
