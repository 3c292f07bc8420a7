"""The same decode through the Triton kernels (the interpreter on the CPU) and through their torch
references gives the same tokens and log-probabilities: penalties, token bans, every sampling class and
prompt lookup, in batches whose requests differ in length (the kernel tests check each kernel alone; this
checks what the step hands them, strides and offsets included)."""

import pytest

from stepgraph import SamplingParams
from stepgraph.examples.model import build
from stepgraph.speculative.decoder import SpecDecoder
from tests.e2e.test_penalties import PROMPTS

CASES = {
    "greedy": [
        SamplingParams(repetition_penalty=1.3, no_repeat_ngram_size=2),
        SamplingParams(min_tokens=5, presence_penalty=0.5),
        SamplingParams(frequency_penalty=0.7, no_repeat_ngram_size=3),
    ],
    "top_k": [  # the small top-k class: its kernels are the quicker ones in the interpreter
        SamplingParams(temperature=0.9, top_k=20, seed=1, no_repeat_ngram_size=3),
        SamplingParams(temperature=0.7, top_k=40, top_p=0.8, seed=2, repetition_penalty=1.2, min_tokens=4),
        SamplingParams(temperature=1.0, top_k=10, min_p=0.1, seed=3),
    ],
    "general": [  # top-p and min-p alone: the top_p class (slow in the interpreter)
        SamplingParams(temperature=0.9, top_k=20, seed=1, no_repeat_ngram_size=3),
        SamplingParams(temperature=0.7, top_p=0.8, seed=2, repetition_penalty=1.2, min_tokens=4),
        SamplingParams(temperature=1.0, min_p=0.1, seed=3),
    ],
}
QUICK = [("greedy", "eagle", False), ("greedy", "ngram", False), ("top_k", "eagle", False)]
SLOW = [("greedy", "eagle", True), ("greedy", "ngram", True), ("top_k", "ngram", False), ("top_k", "eagle", True),
        ("general", "eagle", False), ("general", "ngram", True)]  # fmt: skip


def decode(monkeypatch, interpret: str, draft: str, sampling, overlap: bool, lengths):
    """With prompt lookup also a paged cache and chunked prefill (the chunk forward's first tokens)."""
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    paged = {"kv": "paged", "page_size": 4} if draft == "ngram" else {}
    target, head = build("tiny", draft=draft, **paged)
    eos = SpecDecoder.for_example(target, head).generate(PROMPTS, max_new_tokens=2)[0][1]
    dec = SpecDecoder.for_example(
        target, head, num_draft_tokens=3, max_batch=3, penalties=True, logprobs=2, eos_token_id=eos,
        prefill_chunk=4 if paged else None,
    )  # fmt: skip
    requests = dec.make_requests(PROMPTS, lengths, sampling)
    dec.serve(requests, overlap=overlap)
    return [(r.output, r.finish_reason, r.logprobs, r.top_logprobs) for r in requests]


def agree(monkeypatch, case, draft, overlap, lengths):
    kernels = decode(monkeypatch, "1", draft, CASES[case], overlap, lengths)
    references = decode(monkeypatch, "0", draft, CASES[case], overlap, lengths)
    assert kernels == references
    assert any(len(out) > 4 for out, *_ in kernels)


@pytest.mark.parametrize("case,draft,overlap", QUICK)
def test_kernels_and_references_decode_alike(monkeypatch, case, draft, overlap):
    agree(monkeypatch, case, draft, overlap, [18, 12, 20] if case == "greedy" else [9, 6, 10])


@pytest.mark.slow
@pytest.mark.parametrize("case,draft,overlap", SLOW)
def test_every_class_draft_and_loop_decodes_alike(monkeypatch, case, draft, overlap):
    agree(monkeypatch, case, draft, overlap, [18, 12, 20])
