"""Runnable examples and the example models (installed as ``stepgraph.examples``)."""
