"""Logit biases, repetition, presence and frequency penalties in the step: the definitions (against
Hugging Face's processors and a dense reference), the in-graph state (every verify row penalised with the
drafts before it), and greedy decoding with them equal to a reference decode token for token."""

import dataclasses

import pytest
import torch

from stepgraph import RunnerConfig, SamplingParams, Toggles
from stepgraph.examples.model import build
from stepgraph.speculative.decoder import SpecDecoder
from stepgraph.speculative.penalties import PenaltyState, penalised_logits_ref

PROMPTS = [[5, 17, 99, 3, 17], [42, 7], [1, 2, 3, 4, 5, 6, 7, 1]]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture(autouse=True)
def _torch_paths(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")


def odd_logits(shape, dtype, seed=0):
    """Random logits with ties, zeros, NaN, -inf and +inf among them."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 3
    flat = x.view(-1)
    n = flat.numel()
    picks = torch.randint(0, n, (max(n // 7, 5),), generator=g)
    flat[picks[0::5]] = float("-inf")
    flat[picks[1::5]] = 0.0
    flat[picks[2::5]] = float("nan")
    flat[picks[3::5]] = 1.5  # ties
    flat[picks[4::5]] = float("inf")
    return x.to(dtype)


def test_repetition_penalty_is_hugging_faces():
    transformers = pytest.importorskip("transformers")
    logits = odd_logits((3, 50), torch.float32)
    ids = torch.tensor([[3, 9, 9, 40, 0], [7, 7, 7, 7, 7], [49, 1, 2, 3, 4]])
    for penalty in (1.3, 0.7, 1.05):
        hf = transformers.RepetitionPenaltyLogitsProcessor(penalty)(ids, logits.clone())
        for b in range(3):
            ref = penalised_logits_ref(
                logits[b], ids[b, :2].tolist(), ids[b, 2:].tolist(), SamplingParams(repetition_penalty=penalty)
            )
            torch.testing.assert_close(ref, hf[b], rtol=0, atol=0, equal_nan=True)


def test_logit_bias_and_bad_words_are_transformers_processors():
    """``sequence_bias`` of single tokens and ``bad_words_ids`` (single tokens and sequences) through the
    adapter's ``sampling_params`` give transformers' processors' logits, in transformers' order (the bias,
    the repetition penalty, the bad words); a bad word that is an EOS id stays free, as there."""
    transformers = pytest.importorskip("transformers")
    from stepgraph.adapters.hf_generate import sampling_params

    logits = odd_logits((2, 50), torch.float32, seed=3)
    ids = torch.tensor([[3, 9, 9, 40, 0], [7, 7, 12, 30, 31]])
    bias, eos = {(3,): 2.5, (12,): -1.25, (44,): 0.5, (9,): -7.0}, [2]
    bad = [[40], [45], [2], [0, 46], [30, 31, 47], [9, 0, 48], [5, 5, 5, 5, 5, 5, 49]]
    want = transformers.SequenceBiasLogitsProcessor(bias)(ids, logits.clone())
    want = transformers.RepetitionPenaltyLogitsProcessor(1.4)(ids, want)
    want = transformers.NoBadWordsLogitsProcessor(bad, eos)(ids, want)
    settings = {"do_sample": False, "repetition_penalty": 1.4, "sequence_bias": bias, "bad_words_ids": bad}
    params = sampling_params({**settings, "eos_token_id": eos})
    assert [2] not in map(list, params.bad_words_ids) and dict(params.logit_bias)[44] == 0.5
    assert (want[0, [40, 45, 46]] == float("-inf")).all() and (want[1, [40, 45, 47]] == float("-inf")).all()
    for b in range(2):
        got = penalised_logits_ref(logits[b], ids[b, :2].tolist(), ids[b, 2:].tolist(), params)
        torch.testing.assert_close(got, want[b], rtol=0, atol=0, equal_nan=True)


def test_presence_and_frequency_follow_the_openai_definition():
    logits = torch.zeros(10)
    out = penalised_logits_ref(logits, [1, 2], [2, 2, 5], SamplingParams(presence_penalty=0.5, frequency_penalty=0.25))
    want = torch.zeros(10)
    want[2] = -0.5 - 0.25 * 2  # twice in the output
    want[5] = -0.5 - 0.25  # once; the prompt's tokens 1 and 2 do not count for these two
    assert torch.equal(out, want)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("K", [0, 1, 3])
def test_every_verify_row_is_penalised_with_the_drafts_before_it(dtype, K):
    """Random requests (prompts, outputs and drafts that repeat tokens) in random slots, one padded row:
    row i of each equals the dense reference for output + drafts[:i], bit for bit; the raw logits are
    left as they were."""
    V, L, B = 37, 24, 5
    g = torch.Generator().manual_seed(K)
    state = PenaltyState(rows=8, vocab_size=V, max_len=L, device="cpu")
    slots = [3, 0, 6, -1, 1]
    requests = []
    for slot in slots:
        prompt = torch.randint(0, V // 3, (int(torch.randint(1, 8, (1,), generator=g)),), generator=g).tolist()
        output = torch.randint(0, V // 3, (int(torch.randint(1, 9, (1,), generator=g)),), generator=g).tolist()
        settings = SamplingParams(repetition_penalty=float(torch.rand(1, generator=g) * 1.5 + 0.5),
                                  presence_penalty=float(torch.rand(1, generator=g) * 4 - 2),
                                  frequency_penalty=float(torch.rand(1, generator=g) * 4 - 2),
                                  logit_bias={int(t): float(torch.randn(1, generator=g)) * 3
                                              for t in torch.randint(V // 3 - 3, V, (4,), generator=g)})  # fmt: skip
        if slot >= 0:
            state.admit(slot, settings)
            state.write_prompt(
                torch.tensor([prompt]), torch.tensor([slot]), torch.tensor([0]), torch.tensor([len(prompt)])
            )
            state.record_first(slot, len(prompt), torch.tensor(output[:1]))
            seq = torch.tensor([len(prompt)])
            for t in output[1:]:  # one token per step, as a K = 0 step records it
                state.record(torch.tensor([[t]]), torch.tensor([slot]), seq)
                seq += 1
        requests.append((slot, prompt, output, settings))
    drafts = torch.randint(0, V // 3, (B, K), generator=g)
    seq_len = torch.tensor([len(p) + len(o) - 1 if s >= 0 else 0 for s, p, o, _ in requests])
    raw = odd_logits((B, K + 1, V), dtype, seed=K)
    logits = state.apply(raw, drafts, torch.tensor(slots), seq_len)
    for b, (slot, prompt, output, settings) in enumerate(requests):
        for i in range(K + 1):
            if slot < 0:
                want = penalised_logits_ref(raw[b, i], [0], [], SamplingParams())  # the scratch row: no change
            else:
                want = penalised_logits_ref(raw[b, i], prompt, output + drafts[b, :i].tolist(), settings)
            torch.testing.assert_close(logits[b, i], want, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(raw, odd_logits((B, K + 1, V), dtype, seed=K), rtol=0, atol=0, equal_nan=True)


def test_a_step_records_its_tokens_and_padded_rows_nothing():
    state = PenaltyState(rows=4, vocab_size=11, max_len=10, device="cpu")
    state.admit(1, SamplingParams(repetition_penalty=1.2))
    two_chunks = (torch.tensor([[4, 8, 8]]), torch.tensor([[5, 8, 8]]))  # padded past their lengths
    for start, chunk in enumerate(two_chunks):
        state.write_prompt(chunk, torch.tensor([1]), torch.tensor([start]), torch.tensor([1]))
    assert state.history[1, :3].tolist() == [4, 5, 0]  # nothing past a chunk's length
    state.record_first(1, 2, torch.tensor([6]))
    state.record(torch.tensor([[6, 9, -1], [3, 3, 3]]), torch.tensor([1, -1]), torch.tensor([2, 0]))
    assert state.history[1, :5].tolist() == [4, 5, 6, 6, 9]
    assert state.counts[1].tolist() == [0, 0, 0, 0, 0, 0, 2, 0, 0, 1, 0]
    assert not state.counts[3].any() and not state.history[3].any()  # the scratch row stays zero
    state.move(1, 0)
    assert torch.equal(state.counts[0], state.counts[1]) and state.settings[0, 0].item() == pytest.approx(1.2)


def reference_greedy(target, prompt, n, params, eos=()):
    """Greedy decoding with the logits of each position processed by ``params`` (penalties, min_tokens over
    ``eos``, n-gram bans; whole forwards, no cache), stopping after an EOS id."""
    dev, out = target.device, []
    rows = torch.tensor([target.cfg.max_requests - 1], device=dev)
    while len(out) < n and not (out and out[-1] in eos):
        seq = torch.tensor([prompt + out], device=dev)
        logits, _ = target(seq, torch.arange(seq.shape[1], device=dev)[None], rows)
        out.append(int(torch.argmax(penalised_logits_ref(logits[0, -1], prompt, out, params, eos))))
    return out


# the first prompt's free decode repeats two tokens; the third sets the repetition penalty
PENALISED = [SamplingParams(presence_penalty=1.5, frequency_penalty=2.0), SamplingParams(), SamplingParams(repetition_penalty=1.8)]  # fmt: skip


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
@pytest.mark.parametrize("k", [0, 3])
@pytest.mark.parametrize("chunk", [None, 4], ids=["whole", "chunked"])
def test_greedy_with_penalties_equals_the_reference_decode(overlap, k, chunk):
    target, draft = build("tiny")
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=k, max_batch=3, penalties=True, prefill_chunk=chunk)
    out = dec.generate(PROMPTS, max_new_tokens=[12, 9, 14], sampling=PENALISED, overlap=overlap)
    plain = SpecDecoder.for_example(target, draft, num_draft_tokens=k).generate(PROMPTS, max_new_tokens=[12, 9, 14])
    for prompt, tokens, params, free in zip(PROMPTS, out, PENALISED, plain):
        assert tokens == reference_greedy(target, prompt, len(tokens), params)
        if not params.penalised:
            assert tokens == free  # a request without penalties decodes as it would without them
    assert out[0] != plain[0]  # the penalties change what repeats
    assert dec.info()["penalties"] is True


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
def test_a_batch_without_penalty_settings_runs_unpenalised_keys(overlap):
    """Two at a time: the first two requests set nothing (unpenalised keys); the third, which sets penalties,
    joins when the first ends (penalised keys while it runs), the fourth after it. Each decodes as its
    reference: the penalised one as with penalties, the others as a decoder without them does."""
    target, draft = build("tiny")
    prompts = [PROMPTS[0], PROMPTS[1], PROMPTS[0], PROMPTS[2]]
    params = [SamplingParams(), SamplingParams(), PENALISED[0], SamplingParams()]
    limits = [4, 30, 12, 6]
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, max_batch=2, penalties=True)
    out = dec.generate(prompts, max_new_tokens=limits, sampling=params, overlap=overlap)
    plain = SpecDecoder.for_example(target, draft, num_draft_tokens=3).generate(prompts, max_new_tokens=limits)
    assert out[2] == reference_greedy(target, prompts[2], 12, params[2]) != plain[2]
    assert [out[i] for i in (0, 1, 3)] == [plain[i] for i in (0, 1, 3)]
    info = dec.info()
    generation = info["generation"]
    assert 0 < generation["penalised_steps"] < generation["steps"]
    runs = {key: k["eager_runs"] for key, k in info["keys"].items()}
    assert runs["bs=2/greedy/k=3"] > 0 and runs["bs=2/greedy/k=3/penalised"] > 0, runs


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])  # float32's copy: the logits
def test_a_request_draws_the_same_tokens_whether_its_batch_is_penalised_or_not(dtype):
    draws_the_same_tokens_whether_penalised_or_not(dtype, "cpu")


def draws_the_same_tokens_whether_penalised_or_not(dtype: torch.dtype, device: str) -> None:
    """A seeded request without penalties, beside a longer one of its class (so every step's batch is the
    same two): it draws the same tokens in a decoder without penalties, in the unpenalised keys (its mate
    sets none), in the penalised ones (its mate sets one: its rows read the float32 copy) and with
    STEPGRAPH_PENALTY_VARIANTS=0 (every key applies them)."""
    target, draft = build("tiny", dtype=dtype, device=device)
    free = SamplingParams(temperature=0.8, top_k=40, top_p=0.9, seed=5)
    mate = SamplingParams(temperature=0.8, top_k=40, top_p=0.9, seed=6)
    penalised_mate = dataclasses.replace(mate, repetition_penalty=1.5)
    outs = []
    for penalties, variants, second in ((False, True, mate), (True, True, mate), (True, True, penalised_mate),
                                        (True, False, mate)):  # fmt: skip
        config = RunnerConfig(toggles=Toggles(penalty_variants=variants), progress=False)
        dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, penalties=penalties, config=config)
        outs.append(dec.generate(PROMPTS[:2], max_new_tokens=[12, 48], sampling=[free, second])[0])
        penalised = {
            k.endswith("/penalised")
            for k, stats in dec.info()["keys"].items()
            if stats["eager_runs"] + stats["replays"]
        }
        assert penalised == {second is penalised_mate}, penalised
    assert outs[1:] == outs[:1] * 3


@pytest.mark.parametrize("overlap,chunk", [(False, None), (True, 4)], ids=["sync-whole", "overlapped-chunked"])
def test_a_copy_of_the_target_has_every_draft_accepted_under_penalties(overlap, chunk):
    """The draft's proposals are penalised as the target's logits are (each draft step, the draft-extend
    and the prefill's first draft): a draft identical to the target proposes the target's penalised
    choices, so under strong penalties every draft is accepted (K + 1 tokens a step) and the output is the
    reference decode's. Left as they are (a draft that says ``marks_proposals``), its proposals lose
    drafts wherever a penalty moves the argmax; the output stays the same."""
    target, draft = build("tiny", draft="same")
    prompts = [*PROMPTS, [9, 9, 9, 9], [180]]  # the last: its first draft would repeat its prompt
    params = [SamplingParams(presence_penalty=2.0, frequency_penalty=2.0), SamplingParams(repetition_penalty=3.0),
              SamplingParams(no_repeat_ngram_size=1), SamplingParams(presence_penalty=1.0, repetition_penalty=1.5),
              SamplingParams(no_repeat_ngram_size=1)]  # fmt: skip
    accept, outs = [], []
    for marks in (False, True):
        draft.marks_proposals = marks
        dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, max_batch=5, penalties=True,
                                      prefill_chunk=chunk)  # fmt: skip
        outs.append(dec.generate(prompts, max_new_tokens=40, sampling=params, overlap=overlap))
        accept.append(dec.stats.mean_accept_len)
    for prompt, tokens, p in zip(prompts, outs[0], params):
        assert tokens == reference_greedy(target, prompt, len(tokens), p)
    assert outs[1] == outs[0]
    assert accept[0] == 4.0 and accept[1] < 4.0, accept


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
@pytest.mark.parametrize("k", [0, 3])
def test_greedy_with_a_logit_bias_equals_the_reference_decode(overlap, k):
    """A ban (-inf) on each plain decode's commonest token, a bias on a token it never chose, with a
    repetition penalty on one request: the output is the reference decode's, the banned tokens never come,
    and a request without a bias decodes as it would without one."""
    target, draft = build("tiny")
    plain = SpecDecoder.for_example(target, draft, num_draft_tokens=k).generate(PROMPTS, max_new_tokens=14)
    common = [max(set(p), key=p.count) for p in plain]
    params = [SamplingParams(logit_bias={common[0]: float("-inf"), 300: 4.0}),
              SamplingParams(logit_bias={common[1]: float("-inf"), 7: 2.5, 300: -1.0}, repetition_penalty=1.3),
              SamplingParams()]  # fmt: skip
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=k, max_batch=3, penalties=True)
    out = dec.generate(PROMPTS, max_new_tokens=14, sampling=params, overlap=overlap)
    for prompt, tokens, p in zip(PROMPTS, out, params):
        assert tokens == reference_greedy(target, prompt, 14, p)
    assert common[0] not in out[0] and common[1] not in out[1] and out[:2] != plain[:2]
    assert out[2] == plain[2]


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
@pytest.mark.parametrize("k", [0, 3])
def test_greedy_with_bad_words_equals_the_reference_decode(overlap, k):
    """Bad words taken from each plain decode (a pair, a triple, one token) with a repetition penalty on one
    request: the output is the reference decode's and never holds a bad word; a request without bad words
    decodes as it would without them."""
    target, draft = build("tiny")
    plain = SpecDecoder.for_example(target, draft, num_draft_tokens=k).generate(PROMPTS, max_new_tokens=14)
    params = [SamplingParams(bad_words_ids=[plain[0][2:4], [PROMPTS[0][-1], plain[0][0], plain[0][1]]]),
              SamplingParams(bad_words_ids=[[plain[1][5]], plain[1][1:4]], repetition_penalty=1.3),
              SamplingParams()]  # fmt: skip
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=k, max_batch=3, penalties=True)
    out = dec.generate(PROMPTS, max_new_tokens=14, sampling=params, overlap=overlap)
    for prompt, tokens, p in zip(PROMPTS, out, params):
        assert tokens == reference_greedy(target, prompt, 14, p)
        whole = prompt + tokens
        for word in p.bad_words_ids:
            n = len(word)
            assert all(tuple(whole[j : j + n]) != word for j in range(len(prompt) - n + 1, len(whole) - n + 1))
    assert out[0][0] == plain[0][0] and out[0][1] != plain[0][1] and out[2] == plain[2]


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
@pytest.mark.parametrize("k", [0, 3])
@pytest.mark.parametrize("chunk", [None, 4], ids=["whole", "chunked"])
def test_greedy_with_allowed_tokens_equals_the_reference_decode(overlap, k, chunk):
    """Allowed tokens without the plain decode's first and commonest (the prefill's first token is
    restricted too), with a bias and a repetition penalty on one request: the output is the reference
    decode's and holds allowed tokens only; a request without them decodes as it would without."""
    target, draft = build("tiny")
    plain = SpecDecoder.for_example(target, draft, num_draft_tokens=k).generate(PROMPTS, max_new_tokens=12)
    allowed = [[t for t in range(0, 512, 5) if t not in (p[0], max(set(p), key=p.count))] for p in plain]
    params = [SamplingParams(allowed_token_ids=allowed[0]),
              SamplingParams(allowed_token_ids=allowed[1], logit_bias={10: 3.0, 11: 9.0}, repetition_penalty=1.3),
              SamplingParams()]  # fmt: skip
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=k, max_batch=3, penalties=True, prefill_chunk=chunk)
    out = dec.generate(PROMPTS, max_new_tokens=12, sampling=params, overlap=overlap)
    for prompt, tokens, p in zip(PROMPTS, out, params):
        assert tokens == reference_greedy(target, prompt, 12, p)
    for tokens, ok in zip(out[:2], allowed):
        assert set(tokens) <= set(ok)
    assert 11 not in out[1] and out[2] == plain[2]


def test_sampled_draws_allowed_tokens_only():
    target, draft = build("tiny")
    allowed = [3, 64, 65, 200, 511]
    dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, penalties=True)
    drawn = set()
    for seed in range(3):
        params = SamplingParams(temperature=1.5, top_p=0.95, seed=seed, allowed_token_ids=allowed)
        for tokens in dec.generate(PROMPTS, max_new_tokens=10, sampling=params):
            drawn |= set(tokens)
    assert drawn <= set(allowed) and len(drawn) > 2


def test_bad_logit_biases_and_bad_words_are_refused_by_name():
    target, draft = build("tiny")
    V = target.cfg.vocab_size
    for bad, match in [({1: float("nan")}, "finite number or -inf"), ({1: float("inf")}, "finite number or -inf"),
                       ({-1: 1.0}, "token ids"), ({True: 1.0}, "token ids"), ({2.0: 1.0}, "token ids"),
                       ([(1, 1.0), (1, 2.0)], "twice"), ({t: 1.0 for t in range(1025)}, "at most 1024"),
                       ("ab", "mapping"), ([(1, 2, 3)], "mapping")]:  # fmt: skip
        with pytest.raises((ValueError, TypeError), match=match):
            SamplingParams(logit_bias=bad)
    assert SamplingParams(logit_bias={9: 0.0, 4: -1.0, 2: 3}).logit_bias == ((2, 3.0), (4, -1.0))
    with pytest.raises(ValueError, match="logit_bias=.*build it with penalties=True"):
        SpecDecoder.for_example(target, draft).make_requests([PROMPTS[0]], 4, SamplingParams(logit_bias={3: 1.0}))
    dec = SpecDecoder.for_example(target, draft, penalties=True)
    with pytest.raises(ValueError, match=f"logit_bias names token {V}; ids must be in \\[0, {V}\\)"):
        dec.make_requests([PROMPTS[0]], 4, SamplingParams(logit_bias={3: 1.0, V: 1.0}))
    with pytest.raises(ValueError, match=f"bad_words_ids holds \\[3, {V}\\]; ids must be in"):
        dec.make_requests([PROMPTS[0]], 4, SamplingParams(bad_words_ids=[[1], [3, V]]))
    for bad, match in [([[]], "1 to 16"), ([list(range(17))], "1 to 16"), ([[1, -2]], "token ids"),
                       ([[1.0]], "token ids"), ([[1]] * 129, "at most 128"), ("ab", "list of token id lists"),
                       ([5], "list of token id lists")]:  # fmt: skip
        with pytest.raises((ValueError, TypeError), match=match):
            SamplingParams(bad_words_ids=bad)
    assert SamplingParams(bad_words_ids=[[4, 5], (6,), torch.tensor([7, 8])]).bad_words_ids == ((4, 5), (6,), (7, 8))
    assert SamplingParams(allowed_token_ids=torch.tensor([9, 2, 9])).allowed_token_ids == (2, 9)
    with pytest.raises(ValueError, match="allowed_token_ids=\\[\\] would allow no token"):
        SamplingParams(allowed_token_ids=[])
    with pytest.raises(ValueError, match="allowed_token_ids must hold token ids"):
        SamplingParams(allowed_token_ids=[1, -1])
    with pytest.raises(ValueError, match=f"allowed_token_ids holds {V}; ids must be in"):
        dec.make_requests([PROMPTS[0]], 4, SamplingParams(allowed_token_ids=[1, V]))
    for bad in (SamplingParams(allowed_token_ids=[1, 2], logit_bias={1: float("-inf")}, bad_words_ids=[[2]]),
                SamplingParams(allowed_token_ids=[1, 2], min_tokens=3, stop_token_ids=[2], bad_words_ids=[[1]])):  # fmt: skip
        with pytest.raises(ValueError, match="allowed_token_ids leaves no token to emit"):
            dec.make_requests([PROMPTS[0]], 4, bad)
    dec.make_requests(
        [PROMPTS[0]], 4, SamplingParams(allowed_token_ids=[1, 2], stop_token_ids=[2], bad_words_ids=[[1]])
    )
    with pytest.raises(ValueError, match="allowed_token_ids=.*build it with penalties=True"):
        SpecDecoder.for_example(target, draft).make_requests([PROMPTS[0]], 4, SamplingParams(allowed_token_ids=[1]))


def test_sampled_with_penalties_reproduces_its_seed_on_both_loops():
    target, draft = build("tiny")
    params = SamplingParams(temperature=0.9, top_k=20, seed=11, repetition_penalty=1.3, frequency_penalty=0.5)
    runs = []
    for overlap in (False, True):
        dec = SpecDecoder.for_example(target, draft, num_draft_tokens=3, penalties=True)
        runs.append(dec.generate(PROMPTS[:2], max_new_tokens=16, sampling=params, overlap=overlap))
    assert runs[0] == runs[1]


def test_penalties_refused_where_they_cannot_apply():
    target, draft = build("tiny")
    dec = SpecDecoder.for_example(target, draft)
    with pytest.raises(ValueError, match="build it with penalties=True"):
        dec.make_requests([PROMPTS[0]], 4, SamplingParams(repetition_penalty=1.1))
    for bad in ({"repetition_penalty": 0.0}, {"repetition_penalty": float("inf")}, {"presence_penalty": 2.5},
                {"frequency_penalty": -3.0}):  # fmt: skip
        with pytest.raises(ValueError, match=next(iter(bad))):
            SamplingParams(**bad)
    with pytest.raises(TypeError, match="penalties must be True or False"):
        SpecDecoder.for_example(target, draft, penalties=1)
