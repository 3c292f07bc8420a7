python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
R=benchmarks/results/2026-12-04-h200-run50
run() { timeout 120 env "$@" 2>&1 | grep -v -i "warn" | tee -a $OUT/top_p.log; }
run PROBE_TARGET=1056 python3 $R/probe_top_p.py after
run PROBE_TARGET=1056 PYTHONPATH=$PWD/_before python3 $R/probe_top_p.py before
