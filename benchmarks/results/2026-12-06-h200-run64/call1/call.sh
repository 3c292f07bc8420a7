nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . > $OUT/pip.log 2>&1
(cd _probe/maintree && PYTHONPATH=$PWD timeout 60 python3 ../wide.py main --batches 1,8 2>&1 | grep -v Warn | tee $OUT/main.log)
timeout 60 python3 _probe/wide.py branch --batches 1,8 2>&1 | grep -v Warn | tee $OUT/branch.log
(cd _probe/maintree && PYTHONPATH=$PWD timeout 60 python3 ../wide.py main2 --batches 1,8 2>&1 | grep -v Warn | tee $OUT/main2.log)
timeout 60 python3 _probe/wide.py branch2 --batches 1,8,64 --profile 1 2>&1 | grep -v Warn | tee $OUT/branch2.log
for s in 1 4; do (cd _probe/maintree && PYTHONPATH=$PWD timeout 90 python3 ../wide.py lead --scale $s --cases "k2000 pivot,k2000+p general,mix k2000+p/p" --batches 1,8,64 --profile 1,8 2>&1 | grep -v Warn | tee $OUT/lead_s$s.log); done
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_gpu_kernels.py -k "top or sampl or cut or list" 2>&1 | tee $OUT/tests.log | tail -4
