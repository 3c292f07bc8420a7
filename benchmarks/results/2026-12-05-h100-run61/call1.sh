set -x
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
export TRITON_CACHE_DIR=/tmp/tc
rm -rf /tmp/oldtree && mkdir /tmp/oldtree && cp -r stepgraph benchmarks /tmp/oldtree/ && cp -r _probe/old/stepgraph/* /tmp/oldtree/stepgraph/
NEW=$PWD
python3 _probe/probe_forward.py 2>&1 | tee $OUT/probe_new.log
(cd /tmp/oldtree && PYTHONPATH=/tmp/oldtree python3 $NEW/_probe/probe_forward.py 2>&1 | tee $OUT/probe_old.log)
i=0
for who in new old new old new; do
  i=$((i+1))
  if [ $who = old ]; then dir=/tmp/oldtree; else dir=$NEW; fi
  (cd $dir && PYTHONPATH=$dir timeout 150 python3 benchmarks/bench_adaptive.py --warmup-only --out $OUT/ab_${i}_$who > $OUT/ab_${i}_$who.log 2>&1)
  echo "== $i $who"; grep -i "warm" $OUT/ab_${i}_$who/adaptive.md | cut -c1-400
done
