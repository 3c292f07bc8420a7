# Call 1: the general class (top-k 2000 + top-p 0.9) at HEAD (ce0c011); this first version of the probe profiled
# the top_k_top_p class's kernels (filtered, no pivot).
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 200 python3 benchmarks/results/2026-12-04-h200-run51/probe_general.py head 2>&1 | grep -v -i warn | tee $OUT/general.log
