#!/bin/bash
# usage: bar_count.sh OUTDIR  (from the tree in cwd)
D=$1; mkdir -p $D
PYTHONPATH=. TRITON_INTERPRET=0 timeout 900 .venv/bin/python tests/kernels/gpu_compile_check.py sass /tmp/sb/one.json $D --kernel _round_kernel --set NS_P2=32 --set PIVOT_NB_P2=32 --set PIVOT_POOL=0 --set LATE_LAUNCH=-1 --set LIST_M=128 > $D/sass8.txt 2>&1
head -1 $D/sass8.txt | cut -c1-60
T=/work/main/.venv/lib/python3.11/site-packages/triton/backends/nvidia/bin
$T/nvdisasm -g -c $D/_round_kernel-0.cubin > $D/nv.txt 2>&1
echo "bars $(grep -c BAR.SYNC $D/nv.txt) instr $(grep -c '^        /\*[0-9a-f]*\*/' $D/nv.txt)"
