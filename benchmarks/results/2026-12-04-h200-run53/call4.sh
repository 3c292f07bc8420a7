python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 330 python3 benchmarks/bench_sampling.py --batches 1,8,32,64 --rounds 2 --tokens 48 --settings "top-k 2000 + top-p 0.9" --out $OUT/sampling 2>&1 | grep -v Warn | tail -8
timeout 60 python3 benchmarks/results/2026-12-04-h200-run52/probe_general.py committed 2>&1 | grep -v -i warn | tee -a $OUT/general.log | grep -v "^ "
