# Call 4: variants of the list launches against the committed code (HEAD): the top_k class's list launch and the
# top_p class's round 1 over 2048 (G2) or 4096 (G4) entries a step (one sum a step: fewer of them), and the cut
# launch on 4 warps (W4), each a package copy first on PYTHONPATH (probe_variants.py, tokens checked at B = 8).
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
R=benchmarks/results/2026-12-04-h200-run49
timeout 60 python3 $R/probe_variants.py head 2>&1 | grep " us\|Error" | tee -a $OUT/variants.log
for v in G2 G4 W4; do
  PYTHONPATH=$PWD/_v$v timeout 60 python3 $R/probe_variants.py $v 2>&1 | grep " us\|Error" | tee -a $OUT/variants.log
done
