"""Run another probe with programmatic dependent launch on or off: python _probe/pdl.py on|off probe.py args..."""
import runpy, sys
import stepgraph.kernels._common as common
common.PDL = sys.argv[1] == "on"
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
