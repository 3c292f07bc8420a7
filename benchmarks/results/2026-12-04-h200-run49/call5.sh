# Call 5: the whole step of every sampling class and the mix against greedy, B = 1 / 8 / 32 / 64, on the committed
# kernels (bench_sampling.py, the median of 2 rounds).
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 420 python3 benchmarks/bench_sampling.py --batches 1,8,32,64 --rounds 2 --tokens 48 --out $OUT/sampling 2>&1 \
  | grep -v Warn | tail -12
