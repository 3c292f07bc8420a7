import itertools

import pytest

from stepgraph.keys import Buckets, GraphKey, pad_waste, suggest_buckets
from stepgraph.sampling import Sampling, SamplingParams


def test_sampling_order_and_most_general():
    assert Sampling.most_general([Sampling.GREEDY, Sampling.TOP_K_TOP_P, Sampling.TEMPERATURE]) is Sampling.TOP_K_TOP_P
    assert Sampling.most_general([Sampling.GREEDY, Sampling.TEMPERATURE]) is Sampling.TEMPERATURE
    assert Sampling.most_general([Sampling.TOP_K, Sampling.TEMPERATURE]) is Sampling.TOP_K
    assert Sampling.most_general([Sampling.TOP_K, Sampling.TOP_K_TOP_P]) is Sampling.TOP_K_TOP_P
    assert Sampling.most_general([Sampling.TOP_P, Sampling.TOP_K_TOP_P]) is Sampling.TOP_P
    assert Sampling.most_general([Sampling.TOP_P, Sampling.GENERAL, Sampling.TOP_K]) is Sampling.GENERAL
    assert Sampling.most_general([]) is Sampling.GREEDY


@pytest.mark.parametrize(
    "text,expected",
    [
        ("greedy", Sampling.GREEDY),
        ("top-k-top-p", Sampling.TOP_K_TOP_P),
        ("top-k", Sampling.TOP_K),
        (3, Sampling.TOP_K_TOP_P),
        ("top-p", Sampling.TOP_P),
        (4, Sampling.TOP_P),
        ("general", Sampling.GENERAL),
        (5, Sampling.GENERAL),
        ("TEMPERATURE", Sampling.TEMPERATURE),
        (1, Sampling.TEMPERATURE),
    ],
)
def test_sampling_parse(text, expected):
    assert Sampling.parse(text) is expected


def test_sampling_parse_error_lists_choices():
    with pytest.raises(ValueError, match="greedy, temperature, top_k, top_k_top_p, top_p, general"):
        Sampling.parse("nucleus")


@pytest.mark.parametrize(
    "params,cls",
    [
        (SamplingParams(), Sampling.GREEDY),
        (SamplingParams(temperature=0.7), Sampling.TEMPERATURE),
        (SamplingParams(temperature=0.7, top_k=20), Sampling.TOP_K),
        (SamplingParams(temperature=0.7, top_k=1024, top_p=0.9, min_p=0.1), Sampling.TOP_K),
        (SamplingParams(temperature=0.7, top_k=1025), Sampling.TOP_P),
        (SamplingParams(temperature=0.7, top_k=1025, min_p=0.1), Sampling.TOP_P),
        (SamplingParams(temperature=1.0, top_p=0.9), Sampling.TOP_P),
        (SamplingParams(temperature=1.0, top_p=0.9, min_p=0.05), Sampling.TOP_P),
        (SamplingParams(temperature=1.0, top_k=1025, top_p=0.9), Sampling.GENERAL),
        (SamplingParams(temperature=1.0, top_k=5000, top_p=0.9, min_p=0.1), Sampling.GENERAL),
        (SamplingParams(temperature=0.0, top_k=5000, top_p=0.9), Sampling.GREEDY),
        (SamplingParams(temperature=0.0, top_p=0.9), Sampling.GREEDY),
        (SamplingParams(temperature=0.0, top_k=20), Sampling.GREEDY),
        (SamplingParams(temperature=0.7, min_p=0.05), Sampling.TOP_K_TOP_P),
        (SamplingParams(temperature=0.7, min_p=0.0), Sampling.TEMPERATURE),
    ],
)
def test_sampling_params_class(params, cls):
    assert params.sampling is cls


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": -1.0},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"top_k": -2},
        {"temperature": float("nan")},
        {"min_p": -0.1},
        {"min_p": 1.5},
        {"min_p": float("nan")},
    ],
)
def test_sampling_params_validation(kwargs):
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)


def test_graph_key_str_and_order():
    assert str(GraphKey(8, Sampling.GREEDY)) == "bs=8/greedy"
    assert GraphKey(2, Sampling.GREEDY) < GraphKey(8, Sampling.GREEDY)


def test_buckets_pad_smallest_that_fits():
    b = Buckets([8, 1, 2, 4, 4])
    assert b.sizes == (1, 2, 4, 8)
    assert [b.pad(n) for n in range(1, 9)] == [1, 2, 4, 4, 8, 8, 8, 8]
    assert b.pad(9) is None  # oversize: caller runs eagerly at its own size


def test_buckets_reject_empty_batch_and_bad_lists():
    with pytest.raises(ValueError, match="empty batch"):
        Buckets([1, 2]).pad(0)
    with pytest.raises(ValueError, match="must not be empty"):
        Buckets([])
    with pytest.raises(ValueError, match="positive integers"):
        Buckets([0, 2])


def _brute_force(hist, m):
    sizes = sorted(hist)
    best = None
    for k in range(1, min(m, len(sizes)) + 1):
        for combo in itertools.combinations(sizes[:-1], k - 1):
            cand = (*combo, sizes[-1])
            w = pad_waste(hist, cand)
            if best is None or w < best[0]:
                best = (w, cand)
    return best[0]


@pytest.mark.parametrize(
    "hist,m", [({1: 10, 3: 5, 4: 1, 7: 9, 8: 2}, 3), ({2: 1, 5: 100, 6: 1}, 2), ({4: 3}, 4), ({1: 1, 2: 1, 3: 1}, 1)]
)
def test_suggest_buckets_is_optimal(hist, m):
    sug = suggest_buckets(hist, m)
    assert len(sug) <= m and max(hist) in sug
    assert pad_waste(hist, sug) == _brute_force(hist, m)


def test_the_readme_lists_every_sampling_class_as_declared():
    import pathlib

    from stepgraph.sampling import CLASSES

    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    for c in CLASSES:
        row = f"| `{c.name}` | {c.summary} |"
        assert row in readme, f"README's row for {c.name} differs from stepgraph/sampling.py; it should read: {row}"


def test_each_request_runs_in_the_least_general_class_that_serves_it():
    from stepgraph.sampling import CLASSES, class_of

    cases = {
        SamplingParams(): Sampling.GREEDY,
        SamplingParams(temperature=0.0, top_k=5): Sampling.GREEDY,
        SamplingParams(temperature=0.7): Sampling.TEMPERATURE,
        SamplingParams(temperature=0.7, top_k=1024, top_p=0.5): Sampling.TOP_K,
        SamplingParams(temperature=0.7, top_k=1025): Sampling.TOP_P,
        SamplingParams(temperature=0.7, top_p=0.9): Sampling.TOP_P,
        SamplingParams(temperature=0.7, top_k=3000, top_p=0.9): Sampling.GENERAL,
        SamplingParams(temperature=0.7, min_p=0.1): Sampling.TOP_K_TOP_P,
    }
    for params, want in cases.items():
        assert class_of(params) is want and params.sampling is want
        # every more general class serves it too (a batch runs in its most general request's class)
        assert all(c.fits(params) for c in CLASSES[want:])


def test_each_class_example_is_a_request_of_that_class():
    """The demo's defaults for ``--sampling C`` (the class's example settings) run in class C itself."""
    from stepgraph.sampling import CLASSES

    for c in CLASSES:
        assert c.example.sampling is c.sampling, c.name
