#!/bin/bash
# A/B: the spread launches (new, branch spread-draws) against main, per instance; then per launch on both
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
ONLY="k2000 alone s1,top-p 0.5 s1,top-p 0.9 s1,general k2000+p s1,general k2000+p0.5 s1"
K=stepgraph/kernels
sw() { cp _probe/pivot_$1.py $K/_sampling_pivot.py; cp _probe/mass_$1.py $K/_sampling_mass.py; }
for v in new main new main; do
  sw $v
  timeout 100 python3 _probe/ab.py --label $v --batches 1,8,64 --only "$ONLY" 2>&1 | grep "B=\|Error\|error" | tail -20 > $OUT/ab_$v.$RANDOM.log
done
for f in $OUT/ab_*.log; do echo "== $f"; cat $f; done
for v in new main; do sw $v
for c in "k2000 2000 1.0 early" "topp05 0 0.5 early"; do set -- $c
  timeout 40 python3 _probe/launches.py $v-$1 $2 $3 $4 2>&1 | grep "B=8" | cut -c1-600
done; done | tee $OUT/launches.log
sw new
