#!/bin/bash
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
for B in 1 8; do
timeout 200 ncu --profile-from-start off --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis python3 _probe/ncu_late.py $B > $OUT/ncu_b$B.txt 2>&1; echo "B=$B rc=$?"
grep -E "^  [a-z_]+.*\(|Duration|Registers Per|Waves Per|Achieved Occupancy|Theoretical Occupancy|Memory Throughput|DRAM Throughput|Block Limit Registers|Grid Size|Warp Cycles Per Issued|Issued Warp|No Eligible" $OUT/ncu_b$B.txt | head -300
done
