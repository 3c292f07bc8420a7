#!/bin/bash
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 python3 _probe/drawcount.py cuda 2>&1 | tee $OUT/drawcount.log
for c in "k2000 2000 1.0 early" "topp09 0 0.9 early" "topp05 0 0.5 early" "general 2000 0.9 late"; do set -- $c
  LAUNCHES=7 timeout 60 python3 _probe/launches.py $1 $2 $3 $4 2>&1 | grep B= | cut -c1-700
done | tee $OUT/launches.log
