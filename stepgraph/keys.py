"""Graph keys: (padded batch size, sampling class), and the bucket policy that pads a batch to a key."""

from __future__ import annotations

import bisect
import enum
import math
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: Every size 1..8 gets its own graph (small batches are where launch overhead hurts most), then a
#: coarser ladder up to 64. ``suggest_buckets`` in the report proposes a better list from real traffic.
DEFAULT_BUCKETS: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64)


INT64_MAX = 2**63 - 1


def check_int64(name: str, value: object) -> int:
    """``value`` as an int, or a clear error when it is not an integer in the int64 range (seeds live in
    int64 device tensors)."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise ValueError(f"{name}={value} does not fit int64; use a value in [-2**63, 2**63 - 1]")
    return int(value)


#: The largest top-k of the ``TOP_K`` class (its kernels list the entries at or above a bound on the k-th
#: logit, a few more than k; a larger k would take their slow path more often).
SMALL_TOP_K_MAX = 256


class Sampling(enum.IntEnum):
    """Sampling class of a batch, ordered from least to most general.

    A batch that mixes classes uses the most general one present: its graph handles every less general
    request exactly (a temperature-0 row inside a TEMPERATURE batch gives the greedy result).

    ``TOP_K``: a top-k of 1 to :data:`SMALL_TOP_K_MAX`, with or without top-p and min-p (its kernels look
    for the kept set among the top-k candidates only). ``TOP_K_TOP_P``: any other filter (top-p or min-p
    without such a top-k, or a larger top-k).
    """

    GREEDY = 0
    TEMPERATURE = 1
    TOP_K = 2
    TOP_K_TOP_P = 3

    def __str__(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, value: str | int | Sampling) -> Sampling:
        """A class from itself, its name (``"greedy"``, ``"top-k-top-p"``, any case) or its number.

        Raises
        ------
        ValueError
            For an unknown name or number, or a value of another type (``None`` included).
        """
        if isinstance(value, Sampling):
            return value
        names = ", ".join(str(s) for s in cls)
        if isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value < len(cls):
                raise ValueError(f"unknown sampling class {value}; use one of: {names} (or 0..{len(cls) - 1})")
            return cls(value)
        if not isinstance(value, str):
            raise ValueError(f"sampling must be a Sampling, its name or number, got {value!r}; use one of: {names}")
        try:
            return cls[value.strip().upper().replace("-", "_")]
        except KeyError:
            raise ValueError(f"unknown sampling class {value!r}; use one of: {names}") from None

    @classmethod
    def most_general(cls, classes: Iterable[Sampling]) -> Sampling:
        """The most general class among ``classes`` (GREEDY for none)."""
        return max((cls(c) for c in classes), default=cls.GREEDY)


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling settings.

    ``temperature == 0`` is greedy. ``top_k == 0`` means no top-k filter, ``top_p == 1`` no top-p filter,
    ``min_p == 0`` no min-p filter (min-p keeps tokens at least ``min_p`` times as probable as the most
    probable one). A top-k of 1 to 256 puts the request in the ``TOP_K`` class (top-p and min-p may come
    with it); any other filter in the ``TOP_K_TOP_P`` class.
    ``seed`` makes the request's random stream reproducible (``None``: drawn from the run's seed).
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    min_p: float = 0.0

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p", "min_p"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Real) or isinstance(value, bool):
                raise TypeError(f"{name} must be a number, got {value!r}")
        if not isinstance(self.top_k, numbers.Integral) or isinstance(self.top_k, bool):
            raise TypeError(f"top_k must be an int (0 disables it), got {self.top_k!r}")
        if self.seed is not None:
            check_int64("seed", self.seed)
        if not (self.temperature >= 0.0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not (0.0 <= self.min_p <= 1.0):
            raise ValueError(f"min_p must be in [0, 1] (0 disables it), got {self.min_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")

    @property
    def sampling(self) -> Sampling:
        if self.temperature == 0.0:
            return Sampling.GREEDY
        if 1 <= self.top_k <= SMALL_TOP_K_MAX:
            return Sampling.TOP_K
        if self.top_k > 0 or self.top_p < 1.0 or self.min_p > 0.0:
            return Sampling.TOP_K_TOP_P
        return Sampling.TEMPERATURE


@dataclass(frozen=True, order=True)
class GraphKey:
    """One captured graph: a padded batch size and a sampling class."""

    batch_size: int
    sampling: Sampling

    def __str__(self) -> str:
        return f"bs={self.batch_size}/{self.sampling}"


class Buckets:
    """The sorted list of padded batch sizes; a batch pads up to the smallest bucket that fits."""

    def __init__(self, sizes: Iterable[int]) -> None:
        sizes = tuple(sizes)
        if not sizes:
            raise ValueError("buckets must not be empty; give at least one batch size, e.g. (1, 2, 4, 8)")
        for s in sizes:
            if not isinstance(s, int) or isinstance(s, bool) or s < 1:
                raise ValueError(f"bucket sizes must be positive integers, got {s!r} in {sizes}")
        self.sizes: tuple[int, ...] = tuple(sorted(set(sizes)))

    @property
    def largest(self) -> int:
        return self.sizes[-1]

    def pad(self, batch_size: int) -> int | None:
        """The bucket for ``batch_size``, or ``None`` when it exceeds the largest bucket.

        Raises
        ------
        ValueError
            For an empty batch (``batch_size < 1``).
        """
        if batch_size < 1:
            raise ValueError(f"empty batch: batch_size must be >= 1, got {batch_size}")
        i = bisect.bisect_left(self.sizes, batch_size)
        return self.sizes[i] if i < len(self.sizes) else None

    def key(self, key: GraphKey | tuple[int, Sampling | str | int]) -> GraphKey:
        """``key`` (or ``(batch size, sampling)``) as a :class:`GraphKey` whose batch size is a bucket.

        Raises
        ------
        ValueError
            When the batch size is not one of the buckets.
        """
        if not isinstance(key, GraphKey):
            bs, sampling = key
            key = GraphKey(int(bs), Sampling.parse(sampling))
        if key.batch_size not in self.sizes:
            raise ValueError(f"{key}: batch size {key.batch_size} is not a bucket; buckets are {list(self.sizes)}")
        return key

    def __iter__(self):
        return iter(self.sizes)

    def __len__(self) -> int:
        return len(self.sizes)

    def __repr__(self) -> str:
        return f"Buckets({list(self.sizes)})"


def pad_waste(histogram: Mapping[int, int], sizes: Iterable[int]) -> int:
    """Padded rows run for ``histogram`` (batch size -> count) under ``sizes``; oversize batches count 0."""
    buckets = Buckets(sizes)
    total = 0
    for bs, count in histogram.items():
        padded = buckets.pad(bs)
        if padded is not None:
            total += (padded - bs) * count
    return total


def suggest_buckets(histogram: Mapping[int, int], max_buckets: int) -> tuple[int, ...]:
    """The bucket list of at most ``max_buckets`` sizes that minimises padded rows for ``histogram``.

    Exact dynamic programme over the distinct batch sizes seen: each bucket serves a contiguous run of
    sizes and equals the largest of them, so the largest size seen is always a bucket.
    """
    sizes = sorted(s for s, c in histogram.items() if c > 0)
    if not sizes:
        return ()
    if max_buckets < 1:
        raise ValueError(f"max_buckets must be >= 1, got {max_buckets}")
    n = len(sizes)
    m = min(max_buckets, n)
    counts = [histogram[s] for s in sizes]

    def cost(i: int, j: int) -> int:  # sizes[i..j] served by bucket sizes[j]
        return sum(counts[t] * (sizes[j] - sizes[t]) for t in range(i, j + 1))

    inf = float("inf")
    # best[k][j]: min waste covering sizes[0..j] with k buckets, the last one at sizes[j]
    best = [[inf] * n for _ in range(m + 1)]
    prev = [[-1] * n for _ in range(m + 1)]
    for j in range(n):
        best[1][j] = cost(0, j)
    for k in range(2, m + 1):
        for j in range(n):
            for i in range(j):
                c = best[k - 1][i] + cost(i + 1, j)
                if c < best[k][j]:
                    best[k][j], prev[k][j] = c, i
    k = min(range(1, m + 1), key=lambda kk: (best[kk][n - 1], kk))
    out, j = [], n - 1
    while j >= 0 and k >= 1:
        out.append(sizes[j])
        j, k = prev[k][j], k - 1
    return tuple(sorted(out))
