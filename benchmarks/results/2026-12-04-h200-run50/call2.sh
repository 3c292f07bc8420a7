# Call 2: where a top-p-alone verify's time goes: the committed code, then variants (warps, layout, the
# pivot stats launch without its first draw, and with a plain stats pass).
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
R=benchmarks/results/2026-12-04-h200-run50
run() { timeout 80 env "$@" 2>&1 | grep -v "Warn\|warn" | tee -a $OUT/top_p.log; }
run python3 $R/probe_top_p.py head
run PROBE_WARPS=8 python3 $R/probe_top_p.py warps8
run PROBE_TARGET=1056 python3 $R/probe_top_p.py t1056
run PROBE_MAX_SPLITS=64 python3 $R/probe_top_p.py s64
run PYTHONPATH=$PWD/_vnofirst python3 $R/probe_top_p.py nofirst
run PYTHONPATH=$PWD/_vplain python3 $R/probe_top_p.py plain
