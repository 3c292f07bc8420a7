# Call 3: the committed kernels end to end: the GPU tests that sample, bench_kernels.py --only sampling, and the
# whole step at B = 8 and 32 (bench_sampling.py, one round).
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 150 python3 -m pytest -q tests/gpu/test_gpu_spec.py tests/gpu/test_gpu_logprobs.py tests/gpu/test_gpu_penalties.py \
  tests/gpu/test_gpu_kernels.py -k "sampl or top_p or seed or logprob or penal or pivot or top" 2>&1 | tail -2 \
  | tee $OUT/tests_e2e.log
timeout 150 python3 benchmarks/bench_kernels.py --only sampling --out $OUT/kernels 2>&1 | tail -2
timeout 170 python3 benchmarks/bench_sampling.py --batches 8,32 --rounds 1 --tokens 32 --out $OUT/sampling 2>&1 | tail -12
