#!/bin/bash
# A/B: late rows' attempts of one candidate (new) against main, the general class and top-k 2000 alone; then the
# sampling GPU tests on new
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
ONLY="general k2000+p s1,general k2000+p0.5 s1,k2000 alone s1,top-p 0.5 s1"
P=stepgraph/kernels/_sampling_pivot.py
R=stepgraph/kernels/chain_sampling_ref.py
cp $P _probe/pivot_new.py; cp $R _probe/ref_new.py
for v in new main new; do
  cp _probe/pivot_$v.py $P; cp _probe/ref_$v.py $R
  timeout 80 python3 _probe/ab.py --label $v --batches 1,8,64 --only "$ONLY" 2>&1 | grep "B=\|Error" | tail -20 > $OUT/ab_$v.$(date +%s).log
done
for v in main new; do cp _probe/pivot_$v.py $P; cp _probe/ref_$v.py $R
  timeout 40 python3 _probe/launches.py $v-general 2000 0.9 late 2>&1 | grep "B=" | cut -c1-600
done | tee $OUT/launches_general.log
cp _probe/pivot_new.py $P; cp _probe/ref_new.py $R
for f in $OUT/ab_*.log; do echo "== $f"; cat $f; done

