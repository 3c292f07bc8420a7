#!/bin/bash
# Run 82 (next GPU call): the branch `variants` (the general class's late start a variant of its own, the launches
# after it without the search's code) against main, per launch, per instance and by occupancy; main's `general`
# class with LATE_STEPS at 3 (run 83's NOTES); then main's decoder-level GPU tests in the time left. Set up on a checkout of `variants` (main + variants.patch):
#   mkdir _probe; cp benchmarks/results/2026-12-07-h100-run75/ab.py benchmarks/results/2026-12-07-h100-run74/launches.py \
#     benchmarks/results/2026-12-08-sm90-run82/occupancy.py _probe/
#   for f in mass pivot; do git show main:stepgraph/kernels/_sampling_$f.py > _probe/${f}_main.py
#     git show variants:stepgraph/kernels/_sampling_$f.py > _probe/${f}_var.py; done
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
M=stepgraph/kernels/_sampling_mass.py; P=stepgraph/kernels/_sampling_pivot.py
use() { cp _probe/mass_$1.py $M; cp _probe/pivot_$1.py $P; }
for v in main var; do
  use $v
  timeout 45 python3 _probe/launches.py $v 2000 0.9 late 2>&1 | grep "B=\|Error" | cut -c1-700
  timeout 30 python3 _probe/occupancy.py $v 2>&1 | tail -12
done | tee $OUT/launches_general.log
ONLY="general k2000+p s1,general k2000+p0.5 s1,k2000 alone s1,top-p 0.9 s1"
for v in var main; do
  use $v
  timeout 80 python3 _probe/ab.py --label $v --batches 1,8,64 --only "$ONLY" 2>&1 | grep "B=\|Error" | tail -20 > $OUT/ab_$v.log
done
use main  # run 83's first lever: the late rows' steps after the start, 3 instead of 5 (`attempts.log` there)
LATE_STEPS=3 timeout 60 python3 _probe/ab.py --label main3 --batches 1,8,64 --only "general k2000+p s1,general k2000+p0.5 s1" 2>&1 | grep "B=\|Error" > $OUT/ab_main3.log
for f in $OUT/ab_*.log; do echo "== $f"; cat $f; done
left=$(( ${LIMIT:-560} - SECONDS ))
echo "tests: $left s"
timeout $left python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_gpu_spec.py tests/gpu/test_gpu_penalties.py \
  tests/gpu/test_gpu_prompt_lookup.py tests/gpu/test_gpu_hf.py tests/gpu/test_gpu_paged.py tests/gpu/test_gpu_logprobs.py -x 2>&1 \
  | tail -6 > $OUT/t_decoders.log; cat $OUT/t_decoders.log
