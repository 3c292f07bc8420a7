nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . > $OUT/pip.log 2>&1
for s in 4 1; do
(cd _probe/maintree && PYTHONPATH=$PWD timeout 60 python3 ../late.py --label main --steps 5 --batches 1,8,64 --scale $s 2>&1 | grep -v Warn | tee $OUT/late_main_s$s.log)
timeout 60 python3 _probe/late.py --label new --steps 4 --batches 1,8,64 --scale $s 2>&1 | grep -v Warn | tee $OUT/late_new_s$s.log
done
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_gpu_sampling_contract.py -k "real_vocabulary" 2>&1 | tee $OUT/tests_contract.log | tail -3
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_gpu_kernels.py -k "top or sampl or cut or list" 2>&1 | tail -3 > $OUT/tests_kernels.log; cat $OUT/tests_kernels.log
