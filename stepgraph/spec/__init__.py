"""The chain speculative step (EAGLE topk-1) assembled from switchable pieces, and generation."""

from stepgraph.spec.generate import GenerationStats, Request, SpecDecoder
from stepgraph.spec.step import ChainStep, Draft, Target
from stepgraph.spec.tp import TensorParallel

__all__ = ["ChainStep", "Draft", "GenerationStats", "Request", "SpecDecoder", "Target", "TensorParallel"]
