set -x
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
git rev-parse HEAD 2>/dev/null
mkdir -p $OUT/kernels $OUT/penalties $OUT/logprobs
S=$(date +%s)
timeout 120 python3 benchmarks/bench_kernels.py --only penalties --out $OUT/kernels 2>&1 | tail -30
echo "kernels took $(( $(date +%s) - S ))"; S=$(date +%s)
timeout 280 python3 benchmarks/bench_penalties.py --batches 1,8,32,64 --rounds 3 --tokens 48 --out $OUT/penalties 2>&1 | tail -30
echo "penalties took $(( $(date +%s) - S ))"; S=$(date +%s)
timeout 150 python3 benchmarks/bench_logprobs.py --batches 1,8,32 --rounds 3 --out $OUT/logprobs 2>&1 | tail -20
echo "logprobs took $(( $(date +%s) - S ))"
