# Call 3: penalties at B = 8 over three rounds (call 1's one round put greedy with penalties at 1.10x and the
# top_k class without them 0.4 ms above run 49's), then every class under split layouts aiming at 528 (now),
# 792 and 1056 programs.
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
R=benchmarks/results/2026-12-04-h200-run50
timeout 220 python3 benchmarks/bench_penalties.py --batches 8 --rounds 3 --tokens 48 --out $OUT/penalties_b8 2>&1 \
  | grep -v Warn | tail -8
for t in 528 1056 792; do
  PROBE_TARGET=$t timeout 90 python3 $R/probe_layout.py t$t 2>&1 | grep " us\|Error" | tee -a $OUT/layout.log
done
