set -x
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . > $OUT/pip.log 2>&1
(cd _probe/maintree && PYTHONPATH=$PWD timeout 240 python3 ../wide.py main 2>&1 | tee $OUT/main.log)
timeout 300 python3 _probe/wide.py wide --warps 8,16 2>&1 | tee $OUT/wide.log
