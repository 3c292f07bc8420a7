#!/bin/bash
# A/B: a draw's sub-block masses loaded beside its split masses (new) against main, per instance and per launch;
# then the sampling GPU tests on new
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
ONLY="k2000 alone s1,top-p 0.5 s1,top-p 0.9 s1,general k2000+p s1,general k2000+p0.5 s1"
P=stepgraph/kernels/_sampling_pivot.py
for v in new main new main; do
  cp _probe/pivot_$v.py $P
  timeout 70 python3 _probe/ab.py --label $v --batches 1,8,64 --only "$ONLY" 2>&1 | grep "B=\|Error" | tail -20 > $OUT/ab_$v.$(date +%s).log
done
for f in $OUT/ab_*.log; do echo "== $f"; cat $f; done
for v in ; do cp _probe/pivot_$v.py $P
  timeout 30 python3 _probe/launches.py $v-k2000 2000 1.0 early 2>&1 | grep "B=" | cut -c1-600
done | tee $OUT/launches.log
cp _probe/pivot_new.py $P
timeout 100 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_gpu_sampling_contract.py > $OUT/t_contract.log 2>&1; echo "contract rc=$? $(tail -1 $OUT/t_contract.log)"
[ -n "$KERNELS" ] && timeout 115 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_gpu_kernels.py -k "dependent or top or sampl or cut or list" > $OUT/t_kernels.log 2>&1; echo "kernels rc=$?"
