"""Exceptions raised by stepgraph. Each message names what to change."""

from __future__ import annotations


class StepGraphError(RuntimeError):
    """Base class of stepgraph's runtime errors."""


class CaptureError(StepGraphError):
    """Capturing a key failed; the key runs eagerly unless ``on_capture_error="raise"``.

    ``cause`` is one of ``"host_sync"``, ``"out_of_memory"``, ``"step_error"``, and under tensor
    parallelism ``"peer_failed"`` (another rank's capture of the key failed, so every rank runs it eagerly).
    """

    def __init__(self, message: str, *, key: object = None, cause: str = "step_error") -> None:
        super().__init__(message)
        self.key = key
        self.cause = cause


class RecaptureRefused(StepGraphError):
    """A recapture (e.g. after a weight update) was asked for while step graphs are live."""


class StaleOutputError(StepGraphError):
    """Outputs of an earlier :meth:`StepGraphRunner.run` were read after a later run overwrote them."""


class ReleasedError(StepGraphError):
    """A graph that was released (or is held by a live parent) was used or released again."""


HOST_SYNC_HINT = (
    "the step function synchronised the host during CUDA graph capture (for example .item(), .tolist(), "
    ".cpu(), bool(tensor), torch.nonzero, boolean-mask indexing, or printing a CUDA tensor). Keep every "
    "value on the device (torch.where instead of Python branches, fixed-shape outputs padded with -1); "
    "until then this key runs eagerly"
)

OOM_HINT = (
    "out of GPU memory while capturing. Lower the largest bucket (RunnerConfig.buckets), raise "
    "RunnerConfig.memory_margin_bytes so the guard refuses earlier, or free memory before warm-up; "
    "this key runs eagerly"
)

GENERATOR_HINT = (
    "the step draws random numbers from a torch.Generator of its own, which the capture does not know. "
    "Use torch's default CUDA generator (every capture registers it) or keep the randomness on the device "
    "in a tensor the step owns; until then this key runs eagerly"
)


def classify_capture_exception(exc: BaseException) -> tuple[str, str]:
    """Map an exception raised during capture to ``(cause, hint)``."""
    text = str(exc).lower()
    sync_markers = (
        "operation not permitted when stream is capturing",
        "stream is capturing",
        "capture invalidated",
        "streamcaptureinvalidated",
        "streamcaptureunsupported",
        "called a synchronizing cuda operation",
    )
    if any(m in text for m in sync_markers):
        return "host_sync", HOST_SYNC_HINT
    if "out of memory" in text or isinstance(exc, MemoryError):
        return "out_of_memory", OOM_HINT
    if "generator not in capture mode" in text:
        return "step_error", GENERATOR_HINT
    return "step_error", "the step function raised during warm-up or capture; this key runs eagerly"
