nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . > $OUT/pip.log 2>&1
W="k2000 pivot,top-p,k50+p,mix k50+p/p"
for s in 1 4; do
(cd _probe/maintree && PYTHONPATH=$PWD timeout 60 python3 ../wide.py main --scale $s --cases "$W" --profile 1 2>&1 | grep -v Warn | tee -a $OUT/topp_main.log)
timeout 60 python3 _probe/wide.py new --scale $s --cases "$W" --profile 1 2>&1 | grep -v Warn | tee -a $OUT/topp_new.log
done
timeout 120 python3 _probe/late.py --steps 8,3,2 --batches 1,8,64 --scale 1 2>&1 | grep -v Warn | tee $OUT/late_s1.log
timeout 50 python3 _probe/late.py --steps 8,3 --batches 1,8 --scale 4 2>&1 | grep -v Warn | tee $OUT/late_s4.log
timeout 40 python3 _probe/late.py --steps 8,3 --batches 1 --dtype float32 2>&1 | grep -v Warn | tee $OUT/late_f32.log
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_gpu_sampling_contract.py tests/gpu/test_gpu_kernels.py -k "sampl or top or pivot or late or filter" 2>&1 | tee $OUT/tests.log | tail -4
