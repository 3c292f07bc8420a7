# old and new in turns: the realistic set's warm-up (twin + EAGLE head), Triton cache shared
export TRITON_CACHE_DIR=/tmp/tc
rm -rf /tmp/oldtree && mkdir /tmp/oldtree && cp -r stepgraph benchmarks /tmp/oldtree/ && cp -r _probe/old/stepgraph/* /tmp/oldtree/stepgraph/
NEW=$PWD
i=0
for who in new old new old new; do
  i=$((i+1))
  if [ $who = old ]; then dir=/tmp/oldtree; else dir=$NEW; fi
  (cd $dir && PYTHONPATH=$dir python3 benchmarks/bench_adaptive.py --warmup-only --out $OUT/ab_${i}_$who > $OUT/ab_${i}_$who.log 2>&1)
  echo "== $i $who"; grep -i "warm" $OUT/ab_${i}_$who/adaptive.md | cut -c1-400
done
