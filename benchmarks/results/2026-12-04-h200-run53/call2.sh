python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
for v in head A B now; do
  P=""; case $v in head) P=$PWD/_before;; A) P=$PWD/_var/A;; B) P=$PWD/_var/B;; esac
  timeout 110 env PYTHONPATH=$P python3 benchmarks/results/2026-12-04-h200-run52/probe_general.py $v 2>&1 | grep -v -i warn | tee -a $OUT/general.log | grep -v "^ "
done
