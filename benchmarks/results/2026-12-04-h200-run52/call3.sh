python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
for v in fold2 fold2-r64 late; do
  P=""; E=""; [ $v = late ] && P=$PWD/_before; [ $v = fold2-r64 ] && E="PROBE_STATS_REGS=64"
  timeout 80 env PYTHONPATH=$P $E python3 benchmarks/results/2026-12-04-h200-run52/probe_general.py $v 2>&1 | grep -v -i warn | tee -a $OUT/general.log | grep -v "^ "
done
