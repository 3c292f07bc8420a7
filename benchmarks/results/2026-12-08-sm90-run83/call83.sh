#!/bin/bash
# Run 83 (a GPU call after run 82's, on main as it is), in this order:
# 1. the `general` class with its late rows' steps after the start (LATE_STEPS) at 5 (main), 4 and 3: set when a
#    draw was one candidate; attempts of four candidates took the `top_p` class from seven launches to four;
# 2. the layout's aim of 1056 programs a launch against 660 (five an SM) over pure and mixed `general` batches (run
#    68, on older kernels: pure batches gained 15 µs at B = 8, batches half late lost 5);
# 3. fewer splits a row at B = 1 (run 70 tried more: slower), where every class is above issue 33's 20 µs goal;
# 4. the whole step against greedy after the merge of attempts of four candidates (estimated near 1.031x at B = 8
#    for the `general` class), in the time left.
# Set up on main:
#   mkdir -p _probe; cp benchmarks/results/2026-12-08-sm90-run83/layout.py benchmarks/results/2026-12-07-h100-run75/ab.py _probe/
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
for n in 5 4 3; do
  LATE_STEPS=$n timeout 80 python3 _probe/ab.py --label steps$n --batches 1,8,64 --only general 2>&1 | grep "B=\|Error" | cut -c1-300
done | tee $OUT/late_steps.log
for n in 1056 660; do
  PROGRAMS=$n timeout 100 python3 _probe/layout.py --label $n --batches 8,16 2>&1 | grep "B=\|Error" | cut -c1-300
done | tee $OUT/layout.log
for n in 32 20 16; do  # splits a row at B = 1: 30 (main), 19, 15
  MAX_SPLITS=$n timeout 60 python3 _probe/layout.py --label s$n --batches 1 2>&1 | grep "B=\|Error" | cut -c1-300
done | tee $OUT/splits_b1.log
left=$(( ${LIMIT:-560} - SECONDS ))
echo "e2e: $left s"
timeout $left python3 benchmarks/bench_sampling.py --batches 8,32,64 --rounds 2 --tokens 48 \
  --settings "top-k 2000 + top-p 0.9,top-p 0.9" --out $OUT/e2e 2>&1 | grep -v "^\s*$" | tail -8 | tee $OUT/e2e.log
