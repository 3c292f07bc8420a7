export TRITON_CACHE_DIR=/tmp/tc
NEW=$PWD
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/reliability/test_gpu_reliability.py 2>&1 | tee $OUT/reliability.log | tail -3
i=0
for who in new old new old new old; do
  i=$((i+1))
  if [ $who = old ]; then dir=$NEW/_probe/maintree; else dir=$NEW; fi
  (cd $dir && PYTHONPATH=$dir timeout 150 python3 benchmarks/bench_adaptive.py --warmup-only --out $OUT/ab_${i}_$who > $OUT/ab_${i}_$who.log 2>&1)
  echo "== $i $who"; grep -i "warm" $OUT/ab_${i}_$who/adaptive.md | cut -c1-300
done
