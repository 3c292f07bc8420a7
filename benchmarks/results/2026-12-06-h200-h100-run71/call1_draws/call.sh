#!/bin/bash
# the top_p class's launches of rounds (DRAW_LAUNCHES 5 / 6 / 7), tokens checked at B <= 8
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 400 python3 _probe/draws.py --launches 5,6,7 --batches 1,8,16,32,64 > $OUT/draws.log 2>&1; echo "draws rc=$?"; grep -v Warn $OUT/draws.log | grep -v "^ *warn"
