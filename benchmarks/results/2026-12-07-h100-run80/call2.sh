#!/bin/bash
# Run 80: main, the branch (b9c1792) and the branch with _scan as four 1-D scans (no 8 KB of shared memory):
# per launch of the general class, then per instance over five classes (br3, main). Set up on the branch at db33dc9:
#   mkdir _probe; cp benchmarks/results/2026-12-07-h100-run75/ab.py benchmarks/results/2026-12-07-h100-run74/launches.py _probe/
#   git show main:stepgraph/kernels/_sampling_pivot.py > _probe/pivot_main.py (chain_sampling_ref.py > _probe/ref_main.py)
#   git show b9c1792:... > _probe/pivot_br.py; the tree's two files > _probe/pivot_br3.py, ref_br.py, ref_br3.py
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
P=stepgraph/kernels/_sampling_pivot.py
R=stepgraph/kernels/chain_sampling_ref.py
cp $P _probe/pivot_tree.py; cp $R _probe/ref_tree.py
for v in ${LAUNCH_VERSIONS:-main br br3}; do  # LAUNCH_VERSIONS="" skips the per-launch part
  cp _probe/pivot_$v.py $P; cp _probe/ref_$v.py $R
  timeout 45 python3 _probe/launches.py $v 2000 0.9 late 2>&1 | grep "B=\|Error" | cut -c1-700
done | tee $OUT/launches_general.log
ONLY="general k2000+p s1,general k2000+p0.5 s1,k2000 alone s1,top-p 0.5 s1,top-p 0.9 s1"
for v in br3 main; do
  cp _probe/pivot_$v.py $P; cp _probe/ref_$v.py $R
  timeout 100 python3 _probe/ab.py --label $v --batches 1,8,64 --only "$ONLY" 2>&1 | grep "B=\|Error" | tail -20 > $OUT/ab_$v.log
done
for f in $OUT/ab_*.log; do echo "== $f"; cat $f; done
cp _probe/pivot_tree.py $P; cp _probe/ref_tree.py $R
