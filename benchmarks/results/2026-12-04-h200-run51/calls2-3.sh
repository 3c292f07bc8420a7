python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
run() { timeout 150 env "$@" 2>&1 | grep -v -i "warn" | tee -a $OUT/general.log; }
run python3 benchmarks/results/2026-12-04-h200-run51/probe_general.py after
run PYTHONPATH=$PWD/_before python3 benchmarks/results/2026-12-04-h200-run51/probe_general.py before
