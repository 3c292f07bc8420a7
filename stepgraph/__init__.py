"""stepgraph: capture each speculative decode step as one CUDA graph.

Public API::

    from stepgraph import Buffer, Sampling, SamplingParams, StepGraphRunner      # wrap a step of your own
    from stepgraph import SpecDecoder, ChainStep                                 # speculative decoding
"""

from stepgraph.buffers import KEEP, Buffer, Pad, StaticBuffers
from stepgraph.config import RunnerConfig, Toggles
from stepgraph.errors import CaptureError, RecaptureRefused, StaleOutputError, StepGraphError
from stepgraph.keys import DEFAULT_BUCKETS, Buckets, GraphKey, suggest_buckets
from stepgraph.memory import MemoryGuard, MemoryReading, ReleaseBudget
from stepgraph.outputs import StepOutputs
from stepgraph.runner import StepGraphRunner
from stepgraph.sampling import CLASSES, Sampling, SamplingClass, SamplingParams
from stepgraph.speculative import (
    ChainStep,
    Draft,
    GenerationStats,
    Request,
    RequestQueue,
    SpecDecoder,
    Target,
    TensorParallel,
)

__version__ = "0.2.0"

__all__ = [
    "CLASSES",
    "DEFAULT_BUCKETS",
    "KEEP",
    "Buffer",
    "Buckets",
    "CaptureError",
    "ChainStep",
    "Draft",
    "GenerationStats",
    "GraphKey",
    "MemoryGuard",
    "MemoryReading",
    "Pad",
    "RecaptureRefused",
    "ReleaseBudget",
    "Request",
    "RequestQueue",
    "RunnerConfig",
    "Sampling",
    "SamplingClass",
    "SamplingParams",
    "SpecDecoder",
    "StaleOutputError",
    "StaticBuffers",
    "StepGraphError",
    "StepGraphRunner",
    "StepOutputs",
    "Target",
    "TensorParallel",
    "Toggles",
    "suggest_buckets",
]
