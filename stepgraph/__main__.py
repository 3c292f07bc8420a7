import sys

from stepgraph.cli import main

sys.exit(main(prog="python -m stepgraph"))
