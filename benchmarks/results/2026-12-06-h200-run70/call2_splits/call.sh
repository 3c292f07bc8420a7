#!/bin/bash
# splits a row at B = 1 (chain_sampling.MAX_SPLITS 32 / 48 / 64), then every sampled-verify case of bench_kernels (main)
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 170 python3 _probe/splits.py --batches 1 --max 32,48,64 > $OUT/splits.log 2>&1; echo "splits rc=$?"; grep -v Warn $OUT/splits.log | grep B=
timeout 250 python3 benchmarks/bench_kernels.py --only sampling --out $OUT/scale1 > $OUT/scale1.log 2>&1; echo "s1 rc=$?"
grep -h "sampled verify" $OUT/scale1/kernels.md | cut -d'|' -f2,5 | sed 's/sampled verify //'
