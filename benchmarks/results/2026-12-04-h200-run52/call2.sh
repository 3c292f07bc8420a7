python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
for v in fold late pre; do
  P=""; [ $v = late ] && P=$PWD/_before; [ $v = pre ] && P=$PWD/_pre
  timeout 70 env PYTHONPATH=$P python3 benchmarks/results/2026-12-04-h200-run52/probe_general.py $v 2>&1 | grep -v -i warn | tee -a $OUT/general.log | grep -v "^ "
done
for v in fold late; do
  P=""; [ $v = late ] && P=$PWD/_before
  timeout 120 env PYTHONPATH=$P python3 benchmarks/bench_kernels.py --only sampling --out $OUT/kernels_$v 2>&1 | grep -v -i warn | tail -22
done
