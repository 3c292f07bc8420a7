# Call 5: the split layout aiming at 1056 programs (working tree): the sampling and logprobs kernels' GPU
# tests, then bench_kernels.py --only logprobs before (_before/, HEAD) and after.
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 330 python3 -m pytest -q tests/kernels/test_chain_sampling.py tests/kernels/test_pivot_sampling.py \
  tests/kernels/test_logprobs.py tests/gpu/test_gpu_sampling_contract.py tests/gpu/test_gpu_logprobs.py 2>&1 \
  | tail -3 | tee $OUT/tests.log
PYTHONPATH=$PWD/_before timeout 70 python3 benchmarks/bench_kernels.py --only logprobs --out $OUT/logprobs_prev 2>&1 \
  | grep "logprob" | tail -12
timeout 70 python3 benchmarks/bench_kernels.py --only logprobs --out $OUT/logprobs_now 2>&1 | grep "logprob" | tail -12
