# Call 2: the stats launch's sub-block pass and the mass pass in variants (copied in place per process):
# plain (call 1), prefetch (each step loads the next block first), prefetch_f32 (sub-block sums in float32,
# not exact: a diagnosis), stages (tl.range num_stages=3); prev = HEAD before the change (_before/).
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
R=benchmarks/results/2026-12-03-h200-run47
K=stepgraph/kernels/_sampling_pivot.py
cp $K /tmp/committed.py
for round in 1 2; do
  PYTHONPATH=$PWD/_before python3 benchmarks/results/2026-12-03-h200-run46/probe_pivot.py prev 2>&1 | grep us | tee -a $OUT/pivot.log
  for v in plain prefetch prefetch_f32 stages; do
    cp $R/variants/$v/_sampling_pivot.py $K
    python3 benchmarks/results/2026-12-03-h200-run46/probe_pivot.py $v 2>&1 | grep "us\|Error" | tee -a $OUT/pivot.log
  done
done
cp $R/variants/prefetch/_sampling_pivot.py $K
python3 $R/probe_regs.py prefetch 2>&1 | tail -6 | tee $OUT/regs.log
python3 benchmarks/results/2026-12-03-h200-run45/probe_launches.py 8,64 2>&1 | grep -v Warn | grep -A14 "top-p" | tee $OUT/launches.log
cp /tmp/committed.py $K
