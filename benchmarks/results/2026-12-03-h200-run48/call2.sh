# Call 2: where a small top-k request's bound is computed in the top_p class, its cut in a launch of its own
# (_cut_kernel) in all three: A (the working tree) the stats launch's last program of the row, registers capped
# at 80; B (_varB/) split 0's program in round 0, the lists in round 1; C (_varC/) a launch of its own
# (_bound_kernel). probe_mixed.py for each beside HEAD before the change (_before/).
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
R=benchmarks/results/2026-12-03-h200-run48
python3 $R/probe_regs.py A 2>&1 | tail -6 | tee $OUT/regs.log
PYTHONPATH=$PWD/_varB python3 $R/probe_regs.py B 2>&1 | tail -6 | tee -a $OUT/regs.log
for v in _before:prev stepgraph:A _varB:B _varC:C; do
  dir=${v%%:*}; label=${v##*:}
  if [ $dir = stepgraph ]; then pp=; else pp=$PWD/$dir; fi
  PYTHONPATH=$pp timeout 100 python3 $R/probe_mixed.py $label 2>&1 | grep "us\|Error" | tee -a $OUT/mixed.log
done
