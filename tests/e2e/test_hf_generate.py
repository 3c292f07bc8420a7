"""The adapter's generate() as a transformers user calls it: generation configs, padded input_ids, text,
stop strings, streamers and finish reasons, each against transformers' own generate() where it has one."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from stepgraph import SamplingParams  # noqa: E402
from stepgraph.adapters.hf import hf_spec_decoder  # noqa: E402
from stepgraph.adapters.hf_generate import HFGenerateOutput, generation_settings, sampling_params  # noqa: E402
from tests.helpers import hf_greedy  # noqa: E402

PROMPTS = [[5, 17, 99, 3], [42, 7, 7, 8, 200, 31], [1, 2]]


@pytest.fixture(autouse=True)
def _torch_paths(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # the kernels' torch references: these tests are about the host


def llama(hidden, layers, seed, vocab=256):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256, attn_implementation="sdpa",
        pad_token_id=0,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(cfg).float().eval()


@pytest.fixture(scope="module")
def models():
    return llama(64, 2, seed=0), llama(32, 1, seed=1)


def decoder(models, **kw):
    target, draft = models
    return hf_spec_decoder(target, draft, max_requests=4, max_seq_len=96, attention="gather", **kw)


def test_the_models_generation_config_is_honoured(models):
    """A config that samples (temperature 0.7, top-k 20, top-p 0.8, five tokens) samples five tokens, as
    the same SamplingParams given by hand do; a config that says nothing decodes greedily, 20 - prompt
    tokens long (transformers' max_length)."""
    target, _ = models
    config = transformers.GenerationConfig(do_sample=True, temperature=0.7, top_k=20, top_p=0.8, max_new_tokens=5)
    sampled = decoder(models, generation_config=config).generate(PROMPTS)
    by_hand = decoder(models).generate(
        PROMPTS, max_new_tokens=5, sampling=SamplingParams(temperature=0.7, top_k=20, top_p=0.8)
    )
    assert sampled == by_hand and all(len(s) == 5 for s in sampled)
    assert sampled != [hf_greedy(target, p, 5, eos_token_id=None) for p in PROMPTS]
    plain = decoder(models).generate(PROMPTS, eos_token_id=None)
    assert plain == [hf_greedy(target, p, 20 - len(p), eos_token_id=None) for p in PROMPTS]


def test_settings_merge_as_generate_merges_them():
    model = transformers.GenerationConfig(do_sample=True, temperature=0.6, top_p=0.9, max_new_tokens=7)
    call = transformers.GenerationConfig(temperature=0.3)
    s = generation_settings(model, call, top_p=0.5)
    assert (s["temperature"], s["top_p"], s["max_new_tokens"]) == (0.3, 0.5, 7)
    # transformers' implicit top_k=50 when sampling, as model.generate() applies it
    assert sampling_params(generation_settings(None, do_sample=True)) == SamplingParams(temperature=1.0, top_k=50)
    assert sampling_params(generation_settings(model)) == SamplingParams(temperature=0.6, top_k=50, top_p=0.9)
    assert sampling_params(generation_settings(model, do_sample=False)) == SamplingParams()
    # how transformers runs changes no token: accepted
    generation_settings(transformers.GenerationConfig(use_cache=False, cache_implementation="static"), num_beams=1)


@pytest.mark.parametrize(
    "setting",
    [{"num_beams": 2}, {"output_scores": True},
     {"bad_words_ids": [list(range(1, 18))]}, {"sequence_bias": {(5, 6): 1.0}}, {"num_return_sequences": 2}],
    ids=lambda s: next(iter(s)),
)  # fmt: skip
def test_a_setting_it_cannot_honour_is_refused_by_name(setting, models):
    name = next(iter(setting))
    with pytest.raises(ValueError, match=name):
        generation_settings(transformers.GenerationConfig(**setting))
    with pytest.raises(ValueError, match=name):
        decoder(models).generate(PROMPTS, **setting)


@pytest.mark.parametrize("do_sample", [False, True], ids=["greedy", "sampled"])
def test_the_models_repetition_penalty_is_honoured(models, do_sample):
    """Qwen2.5-Instruct ships repetition_penalty=1.05: a config with one turns the decoder's penalties on,
    greedy output equals transformers' generate() with it, and sampling uses it too (and 1.0 in the call
    turns it off)."""
    target, _ = models
    config = transformers.GenerationConfig(repetition_penalty=1.6, max_new_tokens=12, do_sample=do_sample)
    dec = decoder(models, generation_config=config)
    assert dec.info()["penalties"] is True
    out = dec.generate(PROMPTS)
    off = dec.generate(PROMPTS, repetition_penalty=1.0)
    assert out != off
    if not do_sample:
        assert out == [hf_greedy(target, p, 12, repetition_penalty=1.6) for p in PROMPTS]
        assert off == [hf_greedy(target, p, 12) for p in PROMPTS]
    with pytest.raises(ValueError, match="build it with penalties=True"):
        decoder(models).generate(PROMPTS, repetition_penalty=1.3)


@pytest.mark.parametrize("chunk", [None, 3], ids=["whole", "chunked"])
def test_min_new_tokens_holds_eos_back_as_generate_does(models, chunk):
    """EOS ids the free decode emits early: with min_new_tokens, greedy output equals transformers'
    generate() with it (a config that sets it turns the penalties on), and it stops at EOS after."""
    target, _ = models
    free = hf_greedy(target, PROMPTS[0], 10, eos_token_id=None)
    eos = [free[1], free[4]]
    config = transformers.GenerationConfig(min_new_tokens=6, max_new_tokens=10, eos_token_id=eos)
    dec = decoder(models, generation_config=config, prefill_chunk=chunk)
    assert dec.info()["penalties"] is True
    out = dec.generate(PROMPTS, return_dict_in_generate=True)
    for p, new in zip(PROMPTS, out.new_tokens):
        assert new == hf_greedy(target, p, 10, min_new_tokens=6, eos_token_id=eos)
    assert len(out.new_tokens[0]) >= 6 and not set(out.new_tokens[0][:6]) & set(eos)
    assert dec.generate(PROMPTS, min_new_tokens=0) == [hf_greedy(target, p, 10, eos_token_id=eos) for p in PROMPTS]
    many = list(range(9))
    with pytest.raises(ValueError, match="min_new_tokens holds back at most 8 EOS ids; eos_token_id has 9"):
        dec.generate(PROMPTS, eos_token_id=many)
    dec.generate(PROMPTS[:1], eos_token_id=many, sampling=SamplingParams(min_tokens=6, ignore_eos=True))


def test_min_length_counts_the_prompt_as_generate_does(models):
    """min_length holds EOS back until prompt and output reach it: an id list's own length, a left-padded
    tensor's whole width (transformers counts the padding), on top of min_new_tokens; a config that sets it
    turns the penalties on."""
    target, _ = models
    free = hf_greedy(target, PROMPTS[1], 10, eos_token_id=None)
    eos = [free[0], free[2]]
    dec = decoder(models, generation_config=transformers.GenerationConfig(min_length=11, eos_token_id=eos))
    assert dec.info()["penalties"] is True
    out = dec.generate(PROMPTS, max_new_tokens=10)
    assert out == [hf_greedy(target, p, 10, min_length=11, eos_token_id=eos) for p in PROMPTS]
    assert len(out[1]) >= 11 - len(PROMPTS[1])
    # the short prompt's 4th new token as EOS: allowed after 3 new tokens by the padded width (6 + 3 = 9),
    # not by its own length (2 + 3 < 9)
    short = hf_greedy(target, PROMPTS[2], 10, eos_token_id=None)
    assert short[3] not in short[:3]
    width = max(map(len, PROMPTS))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in PROMPTS])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in PROMPTS])
    got = dec.generate(
        ids, attention_mask=mask, max_new_tokens=10, min_length=9, eos_token_id=[short[3]], pad_token_id=0
    )
    want = target.generate(ids, attention_mask=mask, max_new_tokens=10, min_length=9, eos_token_id=[short[3]],
                           do_sample=False, pad_token_id=0)  # fmt: skip
    assert torch.equal(got, want) and got[2, width + 3] == short[3]
    # max_length counts the width too: every row gets 12 - 6 new tokens (the decoder's min_length off)
    stop = [short[3]]
    got = dec.generate(ids, attention_mask=mask, max_length=12, min_length=0, eos_token_id=stop, pad_token_id=0)
    want = target.generate(ids, attention_mask=mask, max_length=12, eos_token_id=stop, do_sample=False, pad_token_id=0)
    assert got.shape == (3, 12) and torch.equal(got, want)


def test_no_repeat_ngram_size_bans_as_generate_does(models):
    target, _ = models
    dec = decoder(models, penalties=True)
    for n in (2, 3):
        out = dec.generate(PROMPTS, max_new_tokens=16, no_repeat_ngram_size=n, eos_token_id=None)
        assert out == [hf_greedy(target, p, 16, no_repeat_ngram_size=n, eos_token_id=None) for p in PROMPTS]
    with pytest.raises(ValueError, match="no_repeat_ngram_size=2.*build it with penalties=True"):
        decoder(models).generate(PROMPTS, no_repeat_ngram_size=2)


def test_bad_words_and_single_token_biases_act_as_in_generate(models):
    """bad_words_ids (single tokens and sequences) and sequence_bias of single tokens (a config that sets
    one turns the penalties on): greedy output equals transformers' generate() with them, a bad word never
    comes out, and a bad word that is an EOS id is left free, as transformers leaves it."""
    target, _ = models
    free = [hf_greedy(target, p, 12, eos_token_id=None) for p in PROMPTS]
    bad = [[free[0][0]], free[1][1:3], [free[2][1]], [PROMPTS[2][-1], free[2][0], free[2][1], 5]]
    bias = {(free[0][3],): -2.5, (free[2][0],): 0.25, (77,): -3.0}
    config = transformers.GenerationConfig(bad_words_ids=bad, sequence_bias=bias, max_new_tokens=12)
    dec = decoder(models, generation_config=config)
    assert dec.info()["penalties"] is True
    out = dec.generate(PROMPTS, eos_token_id=None)
    want = [hf_greedy(target, p, 12, bad_words_ids=bad, sequence_bias=bias, eos_token_id=None) for p in PROMPTS]
    assert out == want and out != free
    assert not {free[0][0], free[2][1]} & {t for o in out for t in o}
    assert free[1][1:3] not in [out[1][j : j + 2] for j in range(11)] and out[1][1] == free[1][1]
    eos = free[1][0]
    kept = decoder(models, penalties=True).generate(PROMPTS[1:2], bad_words_ids=[[eos]], eos_token_id=eos)
    assert kept == [[eos]]


@pytest.mark.parametrize(
    "setting,match",
    [({"sequence_bias": {5: 1.0}}, "sequence_bias maps"), ({"sequence_bias": {(5,): "x"}}, "sequence_bias maps"),
     ({"bad_words_ids": [5]}, "bad_words_ids must be a list"), ({"bad_words_ids": 5}, "bad_words_ids must be a list"),
     ({"bad_words_ids": [[1.5]]}, "bad_words_ids must hold")],
)  # fmt: skip
def test_malformed_biases_and_bad_words_are_refused_by_name(setting, match):
    with pytest.raises((ValueError, TypeError), match=match):
        generation_settings(None, **setting)


def test_num_return_sequences_samples_each_prompt_that_many_times(models):
    """Sequences come per prompt, one after another (transformers' order): ids, a padded tensor and finish
    reasons alike; a seeded request's first copy is its single sequence and the others differ."""
    dec = decoder(models)
    params = SamplingParams(temperature=1.0, seed=3)
    out = dec.generate(PROMPTS, max_new_tokens=8, sampling=params, num_return_sequences=3, eos_token_id=None)
    assert len(out) == 9 and all(len(o) == 8 for o in out)
    single = dec.generate(PROMPTS, max_new_tokens=8, sampling=params, eos_token_id=None)
    assert [out[3 * i] for i in range(3)] == single
    assert all(len({tuple(o) for o in out[3 * i : 3 * i + 3]}) > 1 for i in range(3))
    ids = torch.tensor([PROMPTS[0], PROMPTS[0][::-1]])
    res = dec.generate(ids, do_sample=True, max_new_tokens=5, num_return_sequences=2, return_dict_in_generate=True)
    assert res.sequences.shape[0] == 4 and torch.equal(res.sequences[:, :4], ids.repeat_interleave(2, 0))
    assert len(res.finish_reasons) == 4
    with pytest.raises(ValueError, match="num_return_sequences=2 needs sampling"):
        dec.generate(PROMPTS, num_return_sequences=2)


def test_bad_calls_say_what_to_change(models):
    dec = decoder(models)
    with pytest.raises(TypeError, match="no generation settings: top_q"):
        dec.generate(PROMPTS, top_q=0.5)
    with pytest.raises(ValueError, match="not both"):
        dec.generate(PROMPTS, sampling=SamplingParams(temperature=0.5), temperature=0.5)
    with pytest.raises(ValueError, match="need a tokenizer"):
        dec.generate("hello")
    with pytest.raises(ValueError, match="attention_mask must be a tensor of input_ids' shape"):
        dec.generate(torch.ones(2, 3, dtype=torch.long), attention_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="max_length=20 leaves no room"):
        dec.generate([list(range(1, 21))])
    with pytest.raises(ValueError, match="temperature > 0"):
        dec.generate(PROMPTS, do_sample=True, temperature=0.0)
    assert dec.slots.free() == dec.max_requests  # nothing was taken


@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_input_ids_decode_as_the_unpadded_prompts(side, models):
    """Left padding gives exactly what transformers' generate() gives (pads kept in front, rows padded
    with pad_token_id after EOS); right padding, which transformers serves wrongly, gives each prompt's
    own tokens."""
    target, _ = models
    S = max(map(len, PROMPTS))
    ids = torch.zeros(len(PROMPTS), S, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(PROMPTS):
        where = slice(S - len(p), S) if side == "left" else slice(0, len(p))
        ids[i, where], mask[i, where] = torch.tensor(p), 1
    out = decoder(models).generate(ids, attention_mask=mask, max_new_tokens=6)
    assert out.shape[1] <= S + 6 and torch.equal(out[:, :S], ids)
    if side == "left":
        ref = target.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
        assert torch.equal(out, ref)
    for i, p in enumerate(PROMPTS):
        own = hf_greedy(target, p, 6)
        assert out[i, S : S + len(own)].tolist() == own


def test_finish_reasons_and_eos(models):
    """return_dict_in_generate gives each request's new tokens and why it stopped; an eos_token_id given
    to the call stops where generate() stops with it."""
    target, _ = models
    free = hf_greedy(target, PROMPTS[0], 8, eos_token_id=None)
    eos = free[3]
    out = decoder(models).generate(PROMPTS[:2], max_new_tokens=8, eos_token_id=eos, return_dict_in_generate=True)
    assert isinstance(out, HFGenerateOutput)
    assert out.new_tokens[0] == hf_greedy(target, PROMPTS[0], 8, eos_token_id=eos) == free[: free.index(eos) + 1]
    assert out.finish_reasons[0] == "stop"
    assert out.finish_reasons[1] == ("stop" if out.new_tokens[1][-1] == eos else "length")
    assert out.sequences == out.new_tokens


@pytest.mark.parametrize("chunk", [None, 3], ids=["whole", "chunked"])
def test_prompt_logprobs_are_the_models_own(models, chunk):
    """prompt_logprobs through the adapter: each prompt token's log_softmax under the model's own forward
    over the prompt, with two alternatives, from a left-padded input_ids tensor (the padding left out)."""
    target, _ = models
    dec = decoder(models, prompt_logprobs=2, prefill_chunk=chunk)
    ids = torch.tensor([[0, 0, *PROMPTS[0]], PROMPTS[1]])
    mask = (torch.arange(ids.shape[1]) >= torch.tensor([[2], [0]])).long()
    out = dec.generate(ids, attention_mask=mask, max_new_tokens=2, return_dict_in_generate=True)
    assert out.logprobs is None
    for prompt, lps, tops in zip(PROMPTS, out.prompt_logprobs, out.prompt_top_logprobs):
        with torch.no_grad():
            ref = torch.log_softmax(target(torch.tensor([prompt])).logits[0, :-1].float(), -1)
        want = ref.gather(-1, torch.tensor(prompt[1:])[:, None])[:, 0]
        assert lps[0] is None and tops[0] is None and len(lps) == len(prompt)
        torch.testing.assert_close(torch.tensor(lps[1:]), want, rtol=0, atol=1e-5)
        assert [[t for t, _ in top] for top in tops[1:]] == ref.topk(2, -1).indices.tolist()


def test_a_stop_token_of_sampling_ends_its_request_with_reason_stop(models):
    """``sampling=SamplingParams(stop_token_ids=...)`` stops as an EOS id does, reason "stop"; with
    ``ignore_eos`` the call's EOS id leaves the request free."""
    target, _ = models
    free = hf_greedy(target, PROMPTS[0], 8, eos_token_id=None)
    stop = next(t for i, t in enumerate(free) if i > 2 and t not in free[:i])
    out = decoder(models).generate(
        PROMPTS[:1], max_new_tokens=8, eos_token_id=free[0], sampling=SamplingParams(stop_token_ids=[stop], ignore_eos=True),
        return_dict_in_generate=True,
    )  # fmt: skip
    assert out.new_tokens == [free[: free.index(stop) + 1]] and out.finish_reasons == ["stop"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from stepgraph.examples.tiny_checkpoint import write_tiny_llama

    path = write_tiny_llama(tmp_path_factory.mktemp("tiny"))
    model = transformers.AutoModelForCausalLM.from_pretrained(path).float().eval()
    return model, transformers.AutoTokenizer.from_pretrained(path)


def test_text_in_text_out(checkpoint):
    model, tok = checkpoint
    dec = hf_spec_decoder(model, model, max_requests=2, max_seq_len=96, attention="gather", tokenizer=tok)
    prompt = "The quick brown"
    ids = tok(prompt, return_tensors="pt")
    ref = model.generate(**ids, max_new_tokens=12, do_sample=False, eos_token_id=None)[0, ids.input_ids.shape[1] :]
    assert dec.generate(prompt, max_new_tokens=12, eos_token_id=None) == tok.decode(ref, skip_special_tokens=True)
    assert dec.generate([prompt, "A draft"], max_new_tokens=4)[0] == tok.decode(ref[:4], skip_special_tokens=True)
    texts = dec.generate(prompt, max_new_tokens=4, do_sample=True, num_return_sequences=2)
    assert isinstance(texts, list) and len(texts) == 2 and all(isinstance(t, str) for t in texts)


def _clean(piece: str) -> bool:
    return piece.isprintable() and "\ufffd" not in piece and piece.strip() == piece and piece != ""


@pytest.mark.parametrize("where", ["inside a token", "across two tokens"])
def test_stop_strings_stop_where_transformers_stops(where, checkpoint):
    """The stop string comes from the model's own greedy text: the start of one token (which reaches past
    it), or the end of one token and the start of the next."""
    model, tok = checkpoint
    dec = hf_spec_decoder(model, model, max_requests=2, max_seq_len=96, attention="gather", tokenizer=tok)
    ids = tok("stepgraph", return_tensors="pt")
    ref = model.generate(**ids, max_new_tokens=12, do_sample=False, eos_token_id=None)[0, ids.input_ids.shape[1] :]
    p = [tok.decode([t]) for t in ref.tolist()]
    if where == "inside a token":
        at = next(i for i in range(1, 11) if _clean(p[i]) and len(p[i]) >= 3)
        stop = p[at][:-1]  # the token goes on past the stop string's end
    else:
        at = next(i for i in range(1, 11) if _clean(p[i - 1]) and _clean(p[i]))
        stop = p[at - 1][-1] + p[at][0]
    want = model.generate(
        **ids, max_new_tokens=12, do_sample=False, eos_token_id=None, stop_strings=[stop], tokenizer=tok
    )[0, ids.input_ids.shape[1] :].tolist()
    assert len(want) <= at + 1 < 12
    out = dec.generate(
        "stepgraph", max_new_tokens=12, eos_token_id=None, stop_strings=[stop], return_dict_in_generate=True
    )
    assert out.new_tokens == [want] and out.finish_reasons == ["stop_string"]


@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
def test_streamers_and_token_callbacks_get_every_token_as_it_comes(overlap, checkpoint):
    model, tok = checkpoint
    dec = hf_spec_decoder(model, model, max_requests=3, max_seq_len=96, attention="gather", tokenizer=tok)
    prompts = ["The quick brown", "A draft proposes", "stepgraph"]
    seen = {0: [], 1: [], 2: []}
    calls = []

    def on_tokens(i, tokens):
        seen[i].extend(tokens)
        calls.append(i)

    out = dec.generate(prompts, max_new_tokens=10, on_tokens=on_tokens, overlap=overlap, return_dict_in_generate=True)
    assert [seen[i] for i in range(3)] == out.new_tokens
    assert len(calls) > 3  # the prefill's token, then each step's
    streamer = transformers.TextIteratorStreamer(tok, skip_prompt=True, skip_special_tokens=True)
    text = dec.generate(prompts[0], max_new_tokens=10, streamer=streamer, overlap=overlap)
    assert "".join(streamer) == text
    ids = tok(prompts[0], return_tensors="pt")
    hf_streamer = transformers.TextIteratorStreamer(tok, skip_prompt=True, skip_special_tokens=True)
    model.generate(**ids, max_new_tokens=10, do_sample=False, streamer=hf_streamer)
    assert "".join(hf_streamer) == text
    with pytest.raises(ValueError, match="a streamer takes one prompt"):
        dec.generate(prompts, streamer=streamer)


@pytest.mark.parametrize(
    "config",
    [dict(temperature=0.7, top_k=20, top_p=0.8), dict(temperature=1.3, top_p=0.5), dict(temperature=0.6),
     dict(top_k=5), dict(temperature=0.9, min_p=0.1), dict(temperature=0.8, top_k=50, top_p=0.9, min_p=0.05)],
    ids=str,
)  # fmt: skip
def test_a_configs_distribution_is_the_one_transformers_warpers_give(config, models):
    """The distribution a generation config samples from, through stepgraph's sampling reference (which
    the kernels equal), against the scores transformers' generate() samples from for the same config."""
    from stepgraph.kernels.chain_sampling_ref import sampling_probs

    target, _ = models
    sp = sampling_params(generation_settings(transformers.GenerationConfig(do_sample=True, **config)))
    ids = torch.tensor([p[:2] for p in PROMPTS])
    out = target.generate(
        ids, attention_mask=torch.ones_like(ids), do_sample=True, max_new_tokens=1, output_scores=True,
        output_logits=True, return_dict_in_generate=True, **config,
    )  # fmt: skip
    logits, want = out.logits[0], torch.softmax(out.scores[0], -1)  # the raw logits, what it sampled from
    B = logits.shape[0]
    full = lambda v: torch.full((B,), v)  # noqa: E731
    got = sampling_probs(logits[:, None], full(sp.temperature), full(sp.top_k), full(sp.top_p), min_p=full(sp.min_p))
    assert torch.equal(got[:, 0] > 0, want > 0)
    torch.testing.assert_close(got[:, 0], want, rtol=1e-5, atol=1e-7)


def test_logprobs_are_those_of_generates_logits(models):
    """With logprobs=2 the result carries each new token's log-probability and two alternatives, equal to
    log_softmax of the logits transformers' generate() returns for the same greedy decode."""
    target, _ = models
    dec = decoder(models, logprobs=2)
    out = dec.generate(PROMPTS[:2], max_new_tokens=7, eos_token_id=None, return_dict_in_generate=True)
    for prompt, new, lps, tops in zip(PROMPTS, out.new_tokens, out.logprobs, out.top_logprobs):
        ids = torch.tensor([prompt])
        ref = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=7, do_sample=False,
                              eos_token_id=None, output_logits=True, return_dict_in_generate=True)  # fmt: skip
        assert new == ref.sequences[0, len(prompt) :].tolist()
        want = torch.log_softmax(torch.cat(ref.logits).float(), -1)  # [7, V]
        torch.testing.assert_close(
            torch.tensor(lps), want.gather(-1, torch.tensor(new)[:, None])[:, 0], atol=1e-5, rtol=0
        )
        assert [[t for t, _ in top] for top in tops] == want.topk(2, -1).indices.tolist()
    assert decoder(models).generate(PROMPTS[:1], max_new_tokens=2, return_dict_in_generate=True).logprobs is None


@pytest.mark.parametrize("kv", ["rows", "paged"])
def test_chunked_prefill_with_a_plain_draft_model_is_exact(models, kv):
    """The target's hidden state carried between chunks is the target's width, not the draft's (64 vs 32)."""
    target, _ = models
    prompts = [[5, 17, 99, 3] * 5, [42, 7, 7, 8, 200, 31], [1, 2]]
    dec = decoder(models, prefill_chunk=5, kv=kv, page_size=4)
    out = dec.generate(prompts, max_new_tokens=12, eos_token_id=None)
    assert out == [hf_greedy(target, p, 12, eos_token_id=None) for p in prompts]
    assert dec.info()["prefill_chunks"]["runs"] > len(prompts)
