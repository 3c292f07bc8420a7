nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . > $OUT/pip.log 2>&1
timeout 60 python3 _probe/late.py --steps 8,5 --batches 1,8 --dtype float32 2>&1 | grep -v Warn | tee $OUT/late_f32.log
timeout 30 python3 _probe/late.py --steps 5 --batches 1 2>&1 | grep -v Warn | tee $OUT/late_bf16.log
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_gpu_sampling_contract.py -k "real_vocabulary" 2>&1 | tee $OUT/tests.log | tail -3
