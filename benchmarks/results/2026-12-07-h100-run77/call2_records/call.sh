#!/bin/bash
# A/B: attempts of four candidates, lower records only (new) against main; then new with fewer launches
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
ONLY="k2000 alone s1,top-p 0.5 s1,top-p 0.9 s1,general k2000+p s1,general k2000+p0.5 s1,k2000 alone s4"
P=stepgraph/kernels/_sampling_pivot.py
R=stepgraph/kernels/chain_sampling_ref.py
cp $P _probe/pivot_new.py; cp $R _probe/ref_new.py
for v in new main new; do
  cp _probe/pivot_$v.py $P; cp _probe/ref_$v.py $R
  timeout 100 python3 _probe/ab.py --label $v --batches 1,8,64 --only "$ONLY" 2>&1 | grep "B=\|Error" | tail -20 > $OUT/ab_$v.$(date +%s).log
done
cp _probe/pivot_new.py $P; cp _probe/ref_new.py $R
for n in 5 4; do
  timeout 70 python3 _probe/ab.py --label new-L$n --launches $n --batches 1,8,64 --only "$ONLY" 2>&1 | grep "B=\|Error" | tail -20 > $OUT/ab_new_L$n.log
done
for f in $OUT/ab_*.log; do echo "== $f"; cat $f; done
timeout 60 python3 _probe/launches.py new-k2000 2000 1.0 early 2>&1 | grep "B=" | cut -c1-600 | tee $OUT/launches_new.log
