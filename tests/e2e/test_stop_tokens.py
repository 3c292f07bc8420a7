"""Per-request stops (vLLM's stop_token_ids and ignore_eos): a stop token ends its request as an EOS id does,
the others in the batch decoding on; ignore_eos runs past the decoder's EOS; min_tokens holds the stop
tokens back; bad values refused by name."""

import pytest
import torch

from stepgraph import SamplingParams
from stepgraph.examples.model import build
from stepgraph.speculative.decoder import SpecDecoder
from stepgraph.speculative.penalties import MAX_BANNED
from tests.e2e.test_penalties import PROMPTS, reference_greedy

N = 14


@pytest.fixture(autouse=True)
def _torch_paths(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")


@pytest.fixture(scope="module")
def models():
    return build("tiny")


@pytest.fixture(scope="module")
def free(models):
    """Each prompt's plain greedy decode, N tokens."""
    target, draft = models
    return SpecDecoder.for_example(target, draft).generate(PROMPTS, max_new_tokens=N)


def first_new(tokens, skip=4):
    """A token of ``tokens`` first seen after position ``skip`` (a stop token that ends the decode there)."""
    return next(t for i, t in enumerate(tokens) if i > skip and t not in tokens[:i])


def prefix(tokens, stop):
    """``tokens`` up to ``stop``'s first place, kept."""
    return tokens[: tokens.index(stop) + 1]


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
@pytest.mark.parametrize("k", [0, 3])
def test_a_stop_token_ends_its_request_as_an_eos_id_does(models, free, overlap, k):
    """Request 1 stops at its stop token (kept, reason "stop"), request 2 at the decoder's EOS id (reason
    "eos"), request 0, whose stop token never comes, runs to its length; each output is a prefix of the
    plain decode."""
    target, draft = models
    stop, eos = first_new(free[1]), first_new(free[2])
    absent = next(t for t in range(512) if t not in free[0])
    assert eos not in free[0] + prefix(free[1], stop) and stop not in prefix(free[2], eos)
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=k, max_batch=3, eos_token_id=eos)
    sampling = [SamplingParams(stop_token_ids=(absent,)), SamplingParams(stop_token_ids=[stop]), SamplingParams()]
    reqs = dec.make_requests(PROMPTS, N, sampling)
    dec.serve(reqs, overlap=overlap)
    assert reqs[0].output == free[0] and reqs[0].finish_reason == "length"
    assert reqs[1].output == prefix(free[1], stop) and reqs[1].finish_reason == "stop"
    assert reqs[2].output == prefix(free[2], eos) and reqs[2].finish_reason == "eos"


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
def test_ignore_eos_runs_past_the_decoders_eos(models, free, overlap):
    """The same EOS id stops one request and not its twin with ignore_eos, which decodes as without an EOS;
    ignore_eos keeps the request's own stop tokens."""
    target, draft = models
    tokens = free[1]
    eos = first_new(tokens, skip=2)
    stop = first_new(tokens, skip=tokens.index(eos) + 1)
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, max_batch=3, eos_token_id=eos)
    sampling = [
        SamplingParams(),
        SamplingParams(ignore_eos=True),
        SamplingParams(ignore_eos=True, stop_token_ids=[stop]),
    ]
    reqs = dec.make_requests([PROMPTS[1]] * 3, N, sampling)
    dec.serve(reqs, overlap=overlap)
    assert reqs[0].output == prefix(tokens, eos) and reqs[0].finish_reason == "eos"
    assert reqs[1].output == tokens and reqs[1].finish_reason == "length"
    assert reqs[2].output == prefix(tokens, stop) and reqs[2].finish_reason == "stop"
    assert reqs[1].eos == () and reqs[2].eos == (stop,)


@pytest.mark.parametrize("k", [0, 3])
def test_min_tokens_holds_the_stop_tokens_back(models, free, k):
    """A stop token that greedy decoding would take at once is held back until min_tokens, as EOS ids are:
    the output equals the reference decode with the stop tokens banned, and holds none before min_tokens."""
    target, draft = models
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=k, max_batch=3, penalties=True, eos_token_id=511)
    sampling = [SamplingParams(stop_token_ids=[f[0], f[1]], min_tokens=6) for f in free]
    reqs = dec.make_requests(PROMPTS, N, sampling)
    dec.serve(reqs)
    for prompt, r, params in zip(PROMPTS, reqs, sampling):
        stops = params.stops((511,))
        assert r.output == reference_greedy(target, prompt, N, params, stops)
        assert not set(r.output[:6]) & set(stops)
    assert [r.output[0] for r in reqs] != [f[0] for f in free]  # the held-back stop tokens changed the decode


def test_stops_are_checked_and_kept_without_repeats(models):
    target, draft = models
    p = SamplingParams(stop_token_ids=torch.tensor([7, 3, 7]))
    assert p.stop_token_ids == (7, 3) and p.stops((3, 9)) == (3, 9, 7)
    assert SamplingParams(ignore_eos=True, stop_token_ids=[7]).stops((3, 9)) == (7,)
    assert p.needs_penalty_state is None  # stops are the host's; only min_tokens needs the device state
    for bad, error in [("7", TypeError), (5, TypeError), ([1.0], ValueError), ([-1], ValueError), ([True], ValueError)]:
        with pytest.raises(error, match="stop_token_ids must"):
            SamplingParams(stop_token_ids=bad)
    with pytest.raises(TypeError, match="ignore_eos must be True or False"):
        SamplingParams(ignore_eos=1)
    dec = SpecDecoder.for_example(target, draft, penalties=True, eos_token_id=list(range(MAX_BANNED - 1)))
    with pytest.raises(ValueError, match="stop_token_ids holds 100000.*would never match"):
        dec.make_requests([[1, 2]], 4, SamplingParams(stop_token_ids=[5, 100000]))
    two = SamplingParams(min_tokens=3, stop_token_ids=[50, 51])
    with pytest.raises(
        ValueError, match=f"at most {MAX_BANNED} EOS and stop token ids; this request has {MAX_BANNED + 1}"
    ):
        dec.make_requests([[1, 2]], 4, two)
    dec.make_requests([[1, 2]], 4, SamplingParams(min_tokens=3, stop_token_ids=[50, 51], ignore_eos=True))
    dec.make_requests([[1, 2]], 4, SamplingParams(stop_token_ids=[50, 51]))  # without min_tokens any number
