import logging

from stepgraph.memory import MemoryGuard, MemoryReading, ReleaseBudget
from tests.helpers import ScriptedReader

MiB = 1 << 20


def reading(free, reserved=0, allocated=0):
    return MemoryReading(free=free * MiB, total=80_000 * MiB, reserved=reserved * MiB, allocated=allocated * MiB)


def guard(*readings, margin=100, budget=None):
    reader = ScriptedReader(*readings)
    return MemoryGuard(reader, margin * MiB, budget=budget or ReleaseBudget()), reader


def test_allows_when_it_fits():
    g, r = guard(reading(free=1000))
    assert g.check("k", 800 * MiB).allowed
    assert g.refusals == 0 and r.releases == 0


def test_refuses_when_short_and_no_cache(caplog):
    g, r = guard(reading(free=500, reserved=100, allocated=90))
    with caplog.at_level(logging.WARNING, logger="stepgraph"):
        d = g.check("bs=8/greedy", 800 * MiB)
    assert not d.allowed and r.releases == 0 and g.refusals == 1
    ref = g.last_refusal
    assert (ref.key, ref.free, ref.needed, ref.reserved, ref.allocated) == (
        "bs=8/greedy",
        500 * MiB,
        800 * MiB,
        100 * MiB,
        90 * MiB,
    )
    msg = caplog.records[-1].getMessage()
    for part in ("bs=8/greedy", "free 500.0 MiB", "needed 800.0 MiB", "reserved 100.0 MiB", "allocated 90.0 MiB"):
        assert part in msg


def test_release_then_capture():
    # short by 400 MiB; 600 MiB cached -> one release, then it fits
    g, r = guard(reading(free=500, reserved=1000, allocated=400), reading(free=1100, reserved=400, allocated=400))
    d = g.check("k", 800 * MiB)
    assert d.allowed and d.released and r.releases == 1 and g.cache_releases == 1 and g.refusals == 0


def test_release_then_refuse():
    g, r = guard(reading(free=500, reserved=1000, allocated=400), reading(free=600, reserved=900, allocated=400))
    d = g.check("k", 800 * MiB)
    assert not d.allowed and d.released and r.releases == 1 and g.refusals == 1


def test_no_release_when_cache_cannot_cover_shortfall():
    g, r = guard(reading(free=500, reserved=450, allocated=400))  # 50 MiB cached, 400 short
    assert not g.check("k", 800 * MiB).allowed and r.releases == 0


def test_one_release_per_key():
    g, r = guard(reading(free=500, reserved=1000, allocated=400))
    g.check("k", 800 * MiB)
    g.check("k", 800 * MiB)
    assert r.releases == 1 and g.refusals == 2
    g.check("other", 800 * MiB)
    assert r.releases == 2


def test_refusal_logged_once_per_key(caplog):
    g, _ = guard(reading(free=10))
    with caplog.at_level(logging.WARNING, logger="stepgraph"):
        for _ in range(5):
            g.check("a", 800 * MiB)
        g.check("b", 800 * MiB)
    assert len([r for r in caplog.records if "not capturing" in r.getMessage()]) == 2
    assert g.refusals == 6


def test_release_cap_of_32_per_process():
    budget = ReleaseBudget()  # the process limit, 32
    reader = ScriptedReader(reading(free=500, reserved=1000, allocated=400))
    guards = [MemoryGuard(reader, 100 * MiB, budget=budget) for _ in range(2)]  # shared across guards
    for i in range(40):
        guards[i % 2].check(f"key{i}", 800 * MiB)
    assert reader.releases == 32 and budget.remaining == 0
    assert sum(g.cache_releases for g in guards) == 32
