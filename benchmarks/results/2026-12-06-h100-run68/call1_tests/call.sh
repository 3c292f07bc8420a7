#!/bin/bash
# GPU tests not yet run on the dependent-launch code, part 1.
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
which ncu nsys; ls /usr/local/cuda*/bin 2>/dev/null | grep -i -E "ncu|nsys|nsight" | head
timeout 330 python3 -m pytest -q -m gpu -p no:cacheprovider --durations=15 tests/gpu/test_gpu_kernels.py -k "not (dependent or top or sampl or cut or list)" > $OUT/kernels_rest.log 2>&1; echo "kernels rc=$?"
tail -3 $OUT/kernels_rest.log
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider --durations=10 tests/gpu/test_gpu_logprobs.py tests/gpu/test_gpu_splice.py > $OUT/logprobs_splice.log 2>&1; echo "logprobs+splice rc=$?"
tail -3 $OUT/logprobs_splice.log
