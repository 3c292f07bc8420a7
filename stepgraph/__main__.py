"""``python -m stepgraph``: the command line (:mod:`stepgraph.cli`)."""

import sys

from stepgraph.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m stepgraph"))
