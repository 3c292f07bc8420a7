#!/bin/bash
# Splits a row at small batches: MAX_SPLITS 32 (main) against 64, per instance, every class
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
for M in 32 64 32 64; do
  MAXSPLITS=$M timeout 140 python3 _probe/ab.py --label M$M --batches 1,4 2>&1 | grep B= > $OUT/ms_$M.$RANDOM.log
done
for f in $OUT/ms_*.log; do echo "== $f"; cat $f; done
