python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
R=benchmarks/results/2026-12-04-h200-run50
timeout 120 env PROBE_TARGET=1056 python3 $R/probe_top_p.py after 2>&1 | grep -v -i "warn" | tee -a $OUT/top_p.log
timeout 150 python3 benchmarks/results/2026-12-04-h200-run51/probe_general.py after 2>&1 | grep -v -i "warn" | tee -a $OUT/general.log
