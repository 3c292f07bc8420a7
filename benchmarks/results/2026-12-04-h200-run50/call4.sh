# Call 4: every class with the layout aiming at 1056 programs (the working tree), against two variants of
# it: the pivot passes loading two tiles ahead (_vahead2/), and that plus the stats and softmax passes
# loading one tile ahead (_vpre/).
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
R=benchmarks/results/2026-12-04-h200-run50
PROBE_TARGET=1056 timeout 90 python3 $R/probe_layout.py head 2>&1 | grep " us\|Error" | tee -a $OUT/variants.log
PROBE_TARGET=1056 PYTHONPATH=$PWD/_vahead2 timeout 90 python3 $R/probe_layout.py ahead2 2>&1 | grep " us\|Error" \
  | tee -a $OUT/variants.log
PROBE_TARGET=1056 PYTHONPATH=$PWD/_vpre timeout 90 python3 $R/probe_layout.py pre 2>&1 | grep " us\|Error" \
  | tee -a $OUT/variants.log
