#!/bin/bash
# Barriers and instructions of the round kernel's sm_90 build at the B = 64 shape (8 splits of 19,456: the late
# rows' pool), no GPU needed; the B = 8 shape is run 78's bar_count.sh. Run from the repository root:
#   TRITON_INTERPRET=1 PYTHONPATH=. python tests/kernels/gpu_compile_check.py record REC.json
#   (keep one _round_kernel entry with SHIFT 16, LAUNCHES 8, PIVOT_POOL 256, LATE_LAUNCH 1 in POOL.json)
#   bash bar_pool.sh POOL.json OUT_DIR
ONE=$1; D=$2; mkdir -p $D
PYTHONPATH=. TRITON_INTERPRET=0 python tests/kernels/gpu_compile_check.py sass $ONE $D --kernel _round_kernel \
  --set NS_P2=8 --set PIVOT_NB_P2=128 --set LIST_M=512 > $D/sass.txt 2>&1
head -1 $D/sass.txt | cut -c1-60
T=$(python -c "import triton.backends.nvidia.compiler as c, pathlib; print(pathlib.Path(c.__file__).with_name('bin'))")
$T/nvdisasm -g -c $D/_round_kernel-0.cubin > $D/nv.txt 2>&1
echo "bars $(grep -c BAR.SYNC $D/nv.txt) instr $(grep -c '^        /\*[0-9a-f]*\*/' $D/nv.txt)"
