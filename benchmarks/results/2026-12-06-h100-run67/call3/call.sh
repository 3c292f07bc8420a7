nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . > $OUT/pip.log 2>&1
for m in off on; do
timeout 60 python3 _probe/pdl.py $m _probe/late.py --label pdl_$m --steps 5 --batches 1,8 --scale 4 2>&1 | grep -v Warn | tee $OUT/late_pdl_$m.log
timeout 60 python3 _probe/pdl.py $m _probe/late.py --label pdl_$m --steps 5 --batches 64 --scale 4 2>&1 | grep -v Warn | tee $OUT/late64_pdl_$m.log
done
for m in off on; do
timeout 60 python3 _probe/pdl.py $m _probe/wide.py pdl_$m --cases "k50+p,k20+minp,k1000,top-p,mix k50+p/p" --batches 1,8,64 --profile 1 2>&1 | grep -v Warn | tee $OUT/wide_pdl_$m.log
done
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_gpu_kernels.py -k "dependent or top or sampl or cut or list" 2>&1 | tee $OUT/tests_kernels.log | tail -3
