#!/bin/bash
# A/B: the draws' chain without the reloads (new) against main, per instance; then per launch
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
ONLY="k2000 alone s1,k2000 alone s4,k1000,top-p 0.9 s1,top-p 0.5 s1,general"
P=stepgraph/kernels/_sampling_pivot.py
for v in new main new main; do
  cp _probe/pivot_$v.py $P
  timeout 120 python3 _probe/ab.py --label $v --batches 1,8,64 --only "$ONLY" 2>&1 | grep B= > $OUT/ab_$v.$RANDOM.log
done
for f in $OUT/ab_*.log; do echo "== $f"; cat $f; done
cp _probe/pivot_new.py $P
for c in "k2000 2000 1.0 early" "topp05 0 0.5 early" "general 2000 0.9 late"; do set -- $c
  timeout 60 python3 _probe/launches.py $1 $2 $3 $4 2>&1 | grep B= | cut -c1-700
done | tee $OUT/launches_new.log
