"""Graph keys: (padded batch size, sampling class, draft length, penalised), and the bucket policy that
pads a batch to a key."""

from __future__ import annotations

import bisect
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from stepgraph.sampling import Sampling

#: Every size 1..8 gets its own graph (small batches are where launch overhead hurts most), then a
#: coarser ladder up to 64. ``suggest_buckets`` in the report proposes a better list from real traffic.
DEFAULT_BUCKETS: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64)


@dataclass(frozen=True, order=True)
class GraphKey:
    """One captured graph: a padded batch size, a sampling class, the draft length it was captured for
    (``None`` for a step without draft lengths) and whether it applies the requests' penalties and other
    logit processing (``penalised``: a step with a penalty state runs the batches where no request sets one
    without it)."""

    batch_size: int
    sampling: Sampling
    draft_len: int | None = None
    penalised: bool = False

    def __str__(self) -> str:
        k = "" if self.draft_len is None else f"/k={self.draft_len}"
        return f"bs={self.batch_size}/{self.sampling}{k}{'/penalised' if self.penalised else ''}"


def draft_lengths(num_draft_tokens: int | Sequence[int], name: str = "num_draft_tokens") -> tuple[int, ...]:
    """``num_draft_tokens`` (an int, or several) as a tuple of distinct draft lengths >= 0, in the order
    given (the first is the default); ``name`` is the argument's name in the messages.

    Raises
    ------
    ValueError / TypeError
        For a value that is not an int (a float, a bool, a string), a negative one, a repeat or none.
    """
    many = isinstance(num_draft_tokens, (list, tuple, set, frozenset))
    values = list(num_draft_tokens) if many else [num_draft_tokens]
    for k in values:
        if not isinstance(k, numbers.Integral) or isinstance(k, bool):
            raise TypeError(f"{name} must be an int or a list of ints, got {k!r} ({type(k).__name__})")
        if k < 0:
            raise ValueError(f"{name} must be >= 0 (0 is plain decoding), got {k}")
    if not values or len(set(values)) != len(values):
        raise ValueError(f"{name}: give distinct draft lengths, got {num_draft_tokens!r}")
    return tuple(int(k) for k in values)


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

    def key(self, key: GraphKey | tuple) -> GraphKey:
        """``key`` (or ``(batch size, sampling)``, ``(batch size, sampling, draft length)`` or ``(batch size,
        sampling, draft length, penalised)``) as a :class:`GraphKey` whose batch size is a bucket.

        Raises
        ------
        ValueError
            When the batch size is not one of the buckets.
        """
        if not isinstance(key, GraphKey):
            bs, sampling, *rest = key
            key = GraphKey(int(bs), Sampling.parse(sampling), *rest)
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
