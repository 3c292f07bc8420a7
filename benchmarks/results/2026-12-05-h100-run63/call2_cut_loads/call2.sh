nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . > $OUT/pip.log 2>&1
for v in main h4 h8 main2; do
  case $v in
    main*) (cd _probe/maintree && PYTHONPATH=$PWD timeout 90 python3 ../wide.py $v 2>&1 | grep -v Warn | tee $OUT/$v.log) ;;
    h4) PSHORT=4 timeout 90 python3 _probe/wide.py $v 2>&1 | tee $OUT/$v.log ;;
    h8*) PSHORT=8 timeout 90 python3 _probe/wide.py $v 2>&1 | tee $OUT/$v.log ;;
    h16) PSHORT=16 timeout 90 python3 _probe/wide.py $v 2>&1 | tee $OUT/$v.log ;;
  esac
done
timeout 220 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_gpu_kernels.py tests/gpu/test_gpu_sampling_contract.py 2>&1 | tee $OUT/tests.log | tail -4
