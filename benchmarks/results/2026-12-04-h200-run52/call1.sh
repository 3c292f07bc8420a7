python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
R=benchmarks/results/2026-12-04-h200-run50
for v in branch main; do
  P=""; [ $v = main ] && P=$PWD/_before
  timeout 70 env PYTHONPATH=$P PROBE_TARGET=1056 python3 $R/probe_top_p.py $v 2>&1 | grep -v -i warn | tee -a $OUT/top_p.log
  timeout 100 env PYTHONPATH=$P python3 benchmarks/results/2026-12-04-h200-run51/probe_general.py $v 2>&1 | grep -v -i warn | tee -a $OUT/general.log
done
