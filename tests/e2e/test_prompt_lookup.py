"""Prompt lookup (``stepgraph.drafts.PromptLookupDraft``): the device-side match against a plain Python
reference, and decoding with it exact (greedy equals the target's own decoding) on every path, with
many tokens accepted where the text repeats."""

import random

import pytest
import torch

from stepgraph import SamplingParams, SpecDecoder
from stepgraph.drafts import PromptLookupDraft
from stepgraph.examples.model import build, greedy_reference
from stepgraph.kernels.prompt_lookup import lookup
from stepgraph.speculative.draft_policy import AutoDraftLength


@pytest.fixture(autouse=True)
def _torch_pieces(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # the kernels' torch references: these tests are about the draft


def lookup_ref(tokens: list[int], at: int, min_ngram: int, max_ngram: int) -> int:
    """The token after the latest earlier match of the longest suffix (ending at ``at``) that matches."""
    for n in range(max_ngram, min_ngram - 1, -1):
        if at < n - 1:
            continue
        suffix = tokens[at - n + 1 : at + 1]
        for j in range(at - 1, n - 2, -1):
            if tokens[j - n + 1 : j + 1] == suffix:
                return tokens[j + 1]
    return -1


@pytest.mark.parametrize("min_ngram,max_ngram", [(1, 1), (1, 3), (2, 4), (3, 3)])
def test_the_match_is_the_latest_of_the_longest_suffix(min_ngram, max_ngram):
    rng = random.Random(min_ngram * 10 + max_ngram)
    L = 37  # odd, and small alphabets: many matches, ties between orders and occurrences
    rows = torch.tensor([[rng.randrange(a) for _ in range(L)] for a in (2, 3, 5, 50)], dtype=torch.int32)
    at = torch.tensor([[rng.randrange(L) for _ in range(6)] + [0, L - 1] for _ in range(4)])
    got = lookup(rows, at, min_ngram, max_ngram)
    want = [[lookup_ref(rows[b].tolist(), int(a), min_ngram, max_ngram) for a in at[b]] for b in range(4)]
    assert got.tolist() == want


def test_the_draft_writes_its_inputs_and_proposes_one_hot():
    draft = PromptLookupDraft(vocab_size=16, num_rows=3, max_seq_len=12, max_ngram=2)
    tokens = torch.tensor([[4, 5, 6, 4, 5]])
    logits, hidden = draft(tokens, torch.arange(5)[None], torch.zeros(1, 5, 8), torch.tensor([1]))
    assert logits.shape == (1, 5, 16) and hidden.shape == (1, 5, 1)
    assert torch.equal(logits.sum(-1), torch.ones(1, 5))
    # nothing before 4, 5, 6 matches (the token itself again); "4 5" matched at 0..1 proposes 6
    assert logits.argmax(-1).tolist() == [[4, 5, 6, 5, 6]]
    assert draft.rows[1, :5].tolist() == [4, 5, 6, 4, 5] and not draft.rows[0].any()
    with pytest.raises(ValueError, match="min_ngram <= max_ngram"):
        PromptLookupDraft(16, 3, 12, min_ngram=3, max_ngram=2)
    with pytest.raises(ValueError, match="num_rows must be an int >= 1"):
        PromptLookupDraft(16, 0, 12)


def repetitive(seed: int, n: int) -> list[list[int]]:
    """Prompts that repeat a phrase, and one that does not."""
    rng = random.Random(seed)
    phrases = [[rng.randrange(512) for _ in range(rng.randint(3, 9))] for _ in range(n - 1)]
    return [p * rng.randint(2, 5) for p in phrases] + [[rng.randrange(512) for _ in range(23)]]


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
def test_greedy_output_is_the_targets_and_repetition_is_accepted(k, overlap):
    target, _ = build("tiny")
    dec = SpecDecoder.for_example(target, PromptLookupDraft.for_example(target), num_draft_tokens=k, max_batch=4)
    prompts = repetitive(k, 4)
    out = dec.generate(prompts, max_new_tokens=120, overlap=overlap)
    assert out == [greedy_reference(target, p, 120) for p in prompts]
    # the tiny random target falls into a cycle: lookup then accepts most drafts (each step emits >= 1)
    assert dec.stats.mean_accept_len > 1 + 0.25 * min(k, 4)  # measured: 1.63, 2.41, 2.32 for K = 1, 3, 5
    assert dec.in_use == (0, 0)


def test_with_auto_the_draft_length_follows_what_lookup_gets_accepted():
    """num_draft_tokens="auto" drops K (to 0 where nothing is accepted): the text that does not repeat
    drafts little, and the output stays the target's."""
    target, _ = build("tiny")
    # step times given, not measured: on a busy CPU measured ones can make one K win every step
    auto = AutoDraftLength(step_ms=lambda bucket, k: 1.0 + 0.1 * k)
    dec = SpecDecoder.for_example(target, PromptLookupDraft.for_example(target), num_draft_tokens=auto, max_batch=4)
    prompts = repetitive(11, 4)
    out = dec.generate(prompts, max_new_tokens=60)
    assert out == [greedy_reference(target, p, 60) for p in prompts]
    assert len(dec.stats.draft_len_steps) > 1, dec.stats.draft_len_steps  # K moved from step to step


@pytest.mark.parametrize("kv,chunk", [("rows", None), ("rows", 5), ("paged", 16)])
def test_exact_over_paged_caches_and_chunked_prefill(kv, chunk):
    target, _ = build("tiny", kv=kv, page_size=4, max_seq_len=192)
    draft = PromptLookupDraft.for_example(target, max_ngram=2)
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, max_batch=4, prefill_chunk=chunk)
    prompts = repetitive(7, 3)
    assert dec.generate(prompts, max_new_tokens=60) == [greedy_reference(target, p, 60) for p in prompts]


def test_sampled_decoding_reproduces_with_penalties_and_logprobs():
    target, _ = build("tiny")
    draft = PromptLookupDraft.for_example(target)
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, max_batch=4, penalties=True, logprobs=1)
    prompts = repetitive(3, 3)
    sp = SamplingParams(temperature=0.7, top_p=0.9, repetition_penalty=1.1, seed=11)
    first = dec.generate(prompts, max_new_tokens=30, sampling=sp)
    again = dec.generate(prompts[::-1], max_new_tokens=30, sampling=sp)[::-1]
    assert first == again and all(len(t) == 30 for t in first)


@pytest.mark.parametrize("chunk", [None, 6], ids=["whole", "chunked"])
def test_hugging_face_models_decode_exactly_with_prompt_lookup(chunk):
    pytest.importorskip("transformers")
    from stepgraph.adapters.hf import hf_spec_decoder
    from tests.e2e.test_hf_adapter import llama
    from tests.helpers import hf_greedy

    model = llama(32, 2, 2, 1, seed=0, vocab=128)
    dec = hf_spec_decoder(
        model, "prompt_lookup", max_requests=3, max_seq_len=128, attention="gather", prefill_chunk=chunk
    )
    prompts = [[3, 9, 27, 81] * 4, [5, 6, 7] * 5 + [8], [100, 2]]
    out = dec.generate(prompts, max_new_tokens=40, eos_token_id=None)
    assert out == [hf_greedy(model, p, 40, eos_token_id=None) for p in prompts]
    # transformers' own prompt-lookup settings are taken as speed settings: the same tokens come out
    assert dec.generate(prompts, max_new_tokens=40, eos_token_id=None, prompt_lookup_num_tokens=10) == out
    assert dec.draft.head.max_ngram == 3
    with pytest.raises(ValueError, match="'prompt_lookup'"):
        hf_spec_decoder(model, "ngram")


def test_the_generation_configs_ngram_size_is_the_lookups():
    transformers = pytest.importorskip("transformers")
    from stepgraph.adapters.hf import hf_spec_decoder
    from tests.e2e.test_hf_adapter import llama

    config = transformers.GenerationConfig(max_matching_ngram_size=1, prompt_lookup_num_tokens=5)
    dec = hf_spec_decoder(llama(32, 1, 2, 1, seed=0), "prompt_lookup", generation_config=config, attention="gather")
    assert (dec.draft.head.min_ngram, dec.draft.head.max_ngram) == (1, 1)
