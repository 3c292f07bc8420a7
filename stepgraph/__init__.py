"""stepgraph: capture each speculative decode step as one CUDA graph.

Public API::

    from stepgraph import Buffer, KEEP, Sampling, SamplingParams, StepGraphRunner, RunnerConfig, Toggles
"""

from stepgraph.buffers import KEEP, Buffer, Pad, StaticBuffers
from stepgraph.config import RunnerConfig, Toggles
from stepgraph.errors import CaptureError, RecaptureRefused, StaleOutputError, StepGraphError
from stepgraph.keys import DEFAULT_BUCKETS, Buckets, GraphKey, Sampling, SamplingParams, suggest_buckets
from stepgraph.memory import MemoryGuard, MemoryReading, ReleaseBudget
from stepgraph.outputs import StepOutputs
from stepgraph.runner import StepGraphRunner

__version__ = "0.1.0"

__all__ = [
    "KEEP",
    "DEFAULT_BUCKETS",
    "Buffer",
    "Buckets",
    "CaptureError",
    "GraphKey",
    "MemoryGuard",
    "MemoryReading",
    "Pad",
    "RecaptureRefused",
    "ReleaseBudget",
    "RunnerConfig",
    "Sampling",
    "SamplingParams",
    "StaleOutputError",
    "StaticBuffers",
    "StepGraphError",
    "StepGraphRunner",
    "StepOutputs",
    "Toggles",
    "suggest_buckets",
]
