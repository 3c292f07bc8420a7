nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . > $OUT/pip.log 2>&1
for s in 1 4; do
(cd _probe/maintree && PYTHONPATH=$PWD timeout 70 python3 ../late.py --label main --steps 5 --batches 1,8,64 --scale $s 2>&1 | grep -v Warn | tee $OUT/late_main_s$s.log)
timeout 70 python3 _probe/late.py --label new --steps 5 --batches 1,8,64 --scale $s 2>&1 | grep -v Warn | tee $OUT/late_new_s$s.log
done
