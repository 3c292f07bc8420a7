"""The memory guard: check free memory before every capture, release PyTorch's cache a bounded number
of times, and refuse cleanly (the key then runs eagerly).

Readings come through :class:`MemoryReader`, so tests drive every branch with scripted numbers and the
runner uses :class:`TorchMemoryReader` (``torch.cuda.mem_get_info`` + allocator counters; NVML for the
per-process figure in the report).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Protocol

import torch

log = logging.getLogger("stepgraph")

#: Cache releases allowed per process: each one costs a device sync and may drop blocks others reuse.
MAX_CACHE_RELEASES = 32


@dataclass(frozen=True)
class MemoryReading:
    """One snapshot, in bytes: device free/total, and PyTorch's reserved/allocated on this device."""

    free: int
    total: int
    reserved: int
    allocated: int

    @property
    def cached(self) -> int:
        """Memory PyTorch holds but does not use (``reserved - allocated``): what a cache release frees."""
        return max(0, self.reserved - self.allocated)


class MemoryReader(Protocol):
    def read(self) -> MemoryReading: ...

    def release_cache(self) -> None: ...


class TorchMemoryReader:
    """Readings of one CUDA device through torch (and NVML for :meth:`process_used`)."""

    def __init__(self, device: torch.device | int | None = None) -> None:
        self.device = torch.device(
            "cuda", torch.cuda.current_device() if device is None else torch.device(device).index or 0
        )

    def read(self) -> MemoryReading:
        free, total = torch.cuda.mem_get_info(self.device)
        return MemoryReading(
            free=int(free),
            total=int(total),
            reserved=int(torch.cuda.memory_reserved(self.device)),
            allocated=int(torch.cuda.memory_allocated(self.device)),
        )

    def release_cache(self) -> None:
        torch.cuda.empty_cache()

    def allocator_counters(self) -> dict[str, int]:
        stats = torch.cuda.memory_stats(self.device)
        return {"num_alloc_retries": int(stats.get("num_alloc_retries", 0)), "num_ooms": int(stats.get("num_ooms", 0))}

    def process_used(self) -> int | None:
        """This process's GPU memory according to NVML (includes the CUDA context), or None."""
        try:
            import os

            import pynvml

            pynvml.nvmlInit()
            try:
                index = self.device.index or 0
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                pid = os.getpid()
                for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if proc.pid == pid and proc.usedGpuMemory is not None:
                        return int(proc.usedGpuMemory)
                return None
            finally:
                pynvml.nvmlShutdown()
        except Exception:  # NVML missing, containerised PID namespaces, MIG: the figure is optional
            return None


class NoReader:
    """Readings where there is no CUDA device: nothing is ever captured, so nothing is read."""

    def read(self) -> MemoryReading:
        return MemoryReading(0, 0, 0, 0)

    def release_cache(self) -> None:
        pass


class ReleaseBudget:
    """How many cache releases this process may still make; shared by every guard by default."""

    def __init__(self, limit: int = MAX_CACHE_RELEASES) -> None:
        self.limit = limit
        self.used = 0

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.used)

    def take(self) -> bool:
        if self.used >= self.limit:
            return False
        self.used += 1
        return True


PROCESS_RELEASE_BUDGET = ReleaseBudget()


@dataclass
class Refusal:
    """A refused capture: the key and the four figures at the moment of refusal (bytes)."""

    key: str
    free: int
    needed: int
    margin: int
    reserved: int
    allocated: int
    rank: int
    time: float = field(default_factory=time.time)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reading: MemoryReading
    released: bool = False


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


class MemoryGuard:
    """Decides, before each capture, whether a key's estimated memory fits.

    ``check(key, needed)``: allowed when ``free - margin >= needed``. When short and PyTorch caches
    enough unused memory to cover the shortfall, the cache is released once for that key (while the
    process budget lasts) and the check repeats. Still short: refused, logged once per key (on every
    rank) with free, needed, reserved and allocated memory, and counted.
    """

    def __init__(
        self,
        reader: MemoryReader,
        margin: int,
        *,
        budget: ReleaseBudget | None = None,
        rank: int = 0,
    ) -> None:
        self.reader = reader
        self.margin = margin
        self.budget = PROCESS_RELEASE_BUDGET if budget is None else budget
        self.rank = rank
        self.refusals = 0
        self.cache_releases = 0
        self.last_refusal: Refusal | None = None
        self._released_for: set[str] = set()
        self._logged: set[str] = set()

    @classmethod
    def default(cls, reader: MemoryReader | None, margin: int) -> MemoryGuard:
        """The guard a runner makes: ``reader``'s readings with the process budget, on this rank; with no
        reader (no graphs), one that reads nothing and may release nothing."""
        if reader is None:
            return cls(NoReader(), margin, budget=ReleaseBudget(0), rank=current_rank())
        return cls(reader, margin, rank=current_rank())

    def fits(self, reading: MemoryReading, needed: int) -> bool:
        return reading.free - self.margin >= needed

    def check(self, key: str, needed: int) -> Decision:
        reading = self.reader.read()
        if self.fits(reading, needed):
            return Decision(True, reading)
        released = False
        shortfall = needed + self.margin - reading.free
        if reading.cached >= shortfall and key not in self._released_for and self.budget.take():
            self._released_for.add(key)
            self.reader.release_cache()
            self.cache_releases += 1
            released = True
            log.info(
                "memory: released PyTorch's cache for key %s (%s cached, %s short)",
                key,
                _mib(reading.cached),
                _mib(shortfall),
            )
            reading = self.reader.read()
            if self.fits(reading, needed):
                return Decision(True, reading, released=True)
        self.refusals += 1
        self.last_refusal = Refusal(
            key=key,
            free=reading.free,
            needed=needed,
            margin=self.margin,
            reserved=reading.reserved,
            allocated=reading.allocated,
            rank=self.rank,
        )
        if key not in self._logged:
            self._logged.add(key)
            log.warning(
                "memory: [rank %d] not capturing key %s: free %s, needed %s (+ margin %s), reserved %s, allocated %s; "
                "it runs eagerly (lower the largest bucket or free memory to capture it)",
                self.rank,
                key,
                _mib(reading.free),
                _mib(needed),
                _mib(self.margin),
                _mib(reading.reserved),
                _mib(reading.allocated),
            )
        return Decision(False, reading, released=released)


def current_rank() -> int:
    """This process's rank in torch.distributed (0 when it is not initialised)."""
    try:
        import torch.distributed as dist

        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    except Exception:  # noqa: BLE001
        return 0
