"""Triton kernels of stepgraph, each with a plain-torch reference beside it (``*_ref``)."""
