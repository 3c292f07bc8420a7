# Call 6: the two GPU test files that call 5's 330 s did not reach the end of.
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -1
timeout 200 python3 -m pytest -q -x tests/gpu/test_gpu_logprobs.py tests/gpu/test_gpu_sampling_contract.py 2>&1 | tail -3 \
  | tee $OUT/tests2.log
