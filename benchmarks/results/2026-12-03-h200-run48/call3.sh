# Call 3: per-launch device times (probe_launches_mixed.py) of top-p 0.9 and a mix at B = 1 and 8: HEAD before
# the change (_before/), A (the working tree) and B (_varB/).
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
R=benchmarks/results/2026-12-03-h200-run48
for v in _before:prev stepgraph:A _varB:B; do
  dir=${v%%:*}; label=${v##*:}
  if [ $dir = stepgraph ]; then pp=; else pp=$PWD/$dir; fi
  PYTHONPATH=$pp timeout 100 python3 $R/probe_launches_mixed.py $label 1,8 2>&1 | grep -v Warn | tee -a $OUT/launches.log
done
