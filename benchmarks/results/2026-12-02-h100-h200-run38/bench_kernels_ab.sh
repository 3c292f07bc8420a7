# bench_kernels (no configuration sweeps) with the stepgraph package of directory $1, into $2; run from the repo
repo=$PWD
cd "$1" && python3 - "$2" "$repo" <<'PY'
import sys
sys.path.insert(1, sys.argv[2] + "/benchmarks")
import bench_kernels as b
import stepgraph
print("stepgraph from", stepgraph.__file__)
b.SWEEP = False
sys.argv = ["bench_kernels.py", "--only", "greedy_verify,tail,sampling,logprobs", "--out", sys.argv[1]]
b.main()
PY
