"""The chain speculative step (EAGLE topk-1) assembled from switchable pieces, and generation."""

from stepgraph.speculative.decoder import GenerationStats, Request, SpecDecoder
from stepgraph.speculative.request_queue import RequestQueue
from stepgraph.speculative.step import ChainStep, Draft, Target
from stepgraph.speculative.tp import TensorParallel

__all__ = [
    "ChainStep", "Draft", "GenerationStats", "Request", "RequestQueue", "SpecDecoder", "Target", "TensorParallel",
]  # fmt: skip
