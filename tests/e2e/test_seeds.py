"""The seed contract: a request's tokens depend only on its prompt, its settings and its seed; never on
its batch mates, its place in the queue, or which implementation of the sampling ran (the kernels on a
GPU or in Triton's interpreter, their torch references, the general tree path)."""

import functools

import pytest

from stepgraph import RunnerConfig, SamplingParams, SpecDecoder, Toggles
from stepgraph.examples.model import build

PROMPT = [11, 29, 3, 77, 5]
SETTINGS = {
    "temperature": SamplingParams(temperature=1.0, seed=1234),
    "top_k": SamplingParams(temperature=0.9, top_k=30, top_p=0.95, seed=-7),
    "top_p": SamplingParams(temperature=1.1, top_p=0.9, seed=2**40 + 3),
}
NEW = 8  # new tokens per request
MATES = [([4, 4, 9], SamplingParams(temperature=0.7, top_k=5, seed=99)), ([8, 1], SamplingParams())]


def off(piece):
    return Toggles.all(True).with_piece(piece, False)


def decode(toggles, params, mates=(), first=False):
    target, draft = build("tiny")
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, config=RunnerConfig(toggles=toggles))
    prompts = [p for p, _ in mates] + [PROMPT]
    sampling = [s for _, s in mates] + [params]
    if first:  # the seeded request queued first instead of last
        prompts, sampling = prompts[::-1], sampling[::-1]
    out = dec.generate(prompts, max_new_tokens=NEW, sampling=sampling)
    return out[0] if first else out[-1]


@functools.cache
def alone(name):
    """The request decoded alone by the sampling kernels (Triton's interpreter here, as on a GPU)."""
    return tuple(decode(Toggles.all(True), SETTINGS[name]))


@pytest.mark.parametrize("name", list(SETTINGS))
def test_a_seeded_request_gets_the_same_tokens_on_every_path(name, monkeypatch):
    params = SETTINGS[name]
    assert len(alone(name)) == NEW
    runs = {
        "torch references (two_launch_sampling off)": decode(off("two_launch_sampling"), params),
        "tree path (lean_sampled_verify off), with batch mates": decode(off("lean_sampled_verify"), params, MATES),
        "every piece off, with batch mates": decode(Toggles.all(False), params, MATES),
    }
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # a plain CPU: the kernels fall back to their references
    runs["no Triton interpreter, queued first"] = decode(Toggles.all(True), params, MATES, first=True)
    assert {k: v for k, v in runs.items() if tuple(v) != alone(name)} == {}


def test_a_seeded_request_gets_the_same_tokens_whoever_its_batch_mates_are():
    runs = {
        "with batch mates": decode(Toggles.all(True), SETTINGS["top_k"], MATES),
        "queued first": decode(Toggles.all(True), SETTINGS["top_k"], MATES[:1], first=True),
    }
    assert {k: v for k, v in runs.items() if tuple(v) != alone("top_k")} == {}


def test_different_seeds_give_different_tokens_and_unseeded_requests_follow_the_decoders_seed():
    a = decode(Toggles.all(True), SamplingParams(temperature=1.0, seed=5))
    b = decode(Toggles.all(True), SamplingParams(temperature=1.0, seed=6))
    assert a != b
    target, draft = build("tiny")
    make = lambda seed: SpecDecoder.for_example(target, draft, seed=seed)  # noqa: E731
    sp = SamplingParams(temperature=1.0)
    first, again, other = (make(s).generate([PROMPT], max_new_tokens=NEW, sampling=sp)[0] for s in (3, 3, 4))
    assert first == again != other
