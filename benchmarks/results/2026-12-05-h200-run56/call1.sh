# Call 1: the whole GPU suite on HEAD (nothing has run on the GPU since session 7's run 55).
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 560 python3 -m pytest -q -m gpu tests -p no:cacheprovider --durations=12 -rfE 2>&1 | grep -v "Warn" | tail -60 | tee $OUT/tests_gpu.log
