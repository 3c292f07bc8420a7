#!/bin/bash
# The GPU call this session could not make (no machine was lent); for the next one, on the branch `samples`:
#   mkdir _probe; cp benchmarks/results/2026-12-07-h100-run75/ab.py benchmarks/results/2026-12-07-h100-run74/launches.py _probe/
#   git show main:stepgraph/kernels/_sampling_pivot.py > _probe/pivot_main.py   (and chain_sampling_ref.py > _probe/ref_main.py)
#   cp stepgraph/kernels/_sampling_pivot.py _probe/pivot_br.py; cp stepgraph/kernels/chain_sampling_ref.py _probe/ref_br.py
#   run: bash benchmarks/results/2026-12-07-sm90-run79/call.sh   (about 5 minutes; move _probe/ out of the tree after)
# Per launch of the general class (main, branch), per instance over five classes (branch, main, branch again), then
# the sampling GPU tests on the branch (the working tree).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
P=stepgraph/kernels/_sampling_pivot.py
R=stepgraph/kernels/chain_sampling_ref.py
cp $P _probe/pivot_tree.py; cp $R _probe/ref_tree.py
for v in main br; do
  cp _probe/pivot_$v.py $P; cp _probe/ref_$v.py $R
  timeout 45 python3 _probe/launches.py $v 2000 0.9 late 2>&1 | grep "B=\|Error" | cut -c1-700
done | tee $OUT/launches_general.log
ONLY="general k2000+p s1,general k2000+p0.5 s1,k2000 alone s1,top-p 0.5 s1,top-p 0.9 s1"
for v in br main br2; do
  cp _probe/pivot_${v%2}.py $P; cp _probe/ref_${v%2}.py $R
  timeout 100 python3 _probe/ab.py --label $v --batches 1,8,64 --only "$ONLY" 2>&1 | grep "B=\|Error" | tail -20 > $OUT/ab_$v.log
done
for f in $OUT/ab_*.log; do echo "== $f"; cat $f; done
cp _probe/pivot_tree.py $P; cp _probe/ref_tree.py $R
timeout 170 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_gpu_sampling_contract.py tests/gpu/test_gpu_kernels.py \
  -k "sampl or pivot or contract or philox or reference" > $OUT/t_sampling.log 2>&1
echo "tests rc=$? $(tail -1 $OUT/t_sampling.log)"
