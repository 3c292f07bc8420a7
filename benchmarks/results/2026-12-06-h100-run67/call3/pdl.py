"""Run another probe with the sampled verify's launches dependent or not: python _probe/pdl.py on|off probe.py args..."""
import functools, runpy, sys
from stepgraph.kernels import chain_sampling
chain_sampling.chain_verify_sampling = functools.partial(chain_sampling.chain_verify_sampling, dependent=sys.argv[1] == "on")
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
