"""HF adapter: speculative greedy output equals the target's own greedy generate() (float32, CPU)."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from stepgraph import RunnerConfig, Toggles  # noqa: E402
from stepgraph.adapters.hf import PREFILL_CHUNK, HFCausalLM, default_prefill_chunk, hf_spec_decoder  # noqa: E402
from stepgraph.kv import rows as kv_rows  # noqa: E402
from tests.helpers import hf_greedy  # noqa: E402


def llama(hidden, layers, heads, kv_heads, seed, vocab=256):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=256,
        attn_implementation="sdpa", pad_token_id=0,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(cfg).float().eval()


PROMPTS = [[5, 17, 99, 3], [42, 7, 7, 8, 200, 31, 9], [1, 2]]


@pytest.mark.parametrize(
    "toggles,attention,kv",
    [
        (Toggles.all(True), "auto", "rows"),
        (Toggles.all(False), "gather", "rows"),
        (Toggles.all(True), "auto", "paged"),
        (Toggles.all(False), "gather", "paged"),
    ],
    ids=["pieces-on", "plain", "paged-in-place", "paged-gather"],
)
def test_greedy_equals_hf_generate(toggles, attention, kv):
    """In float32 the speculative output equals generate() token for token, with the rows (or pages) read
    in place (``auto`` picks ``rows`` for Llama) and with the gather; the paged pool is small enough that
    requests wait for pages."""
    target, draft = llama(64, 2, 2, 1, seed=0), llama(32, 1, 2, 1, seed=1)
    cfg = RunnerConfig(toggles=toggles)
    pages = {"kv": "paged", "page_size": 4, "num_pages": 10} if kv == "paged" else {}
    dec = hf_spec_decoder(target, draft, max_requests=4, max_seq_len=96, config=cfg, attention=attention, **pages)
    out = dec.generate(PROMPTS, max_new_tokens=6)
    for prompt, got in zip(PROMPTS, out):
        ids = torch.tensor([prompt])
        ref = target.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False, eos_token_id=None
        )
        assert got == ref[0, len(prompt) :].tolist()
    assert 1.0 <= dec.stats.mean_accept_len <= 4.0
    assert dec.in_use == (0, 0) and dec.info()["kv"]["kind"] == kv


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_rows_attention_matches_the_gather(family, monkeypatch):
    """attention="rows" reads cache rows in place (the Triton decode attention; prefill and long forwards
    gather): logits match the gathering adapter to float32 tolerance over a prefill and verify-shaped
    forwards at per-request positions, rows in any order."""
    if family == "llama":
        model = llama(64, 2, 4, 2, seed=3)
    else:
        torch.manual_seed(3)
        cfg = transformers.Qwen2Config(
            vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, attn_implementation="sdpa",
        )  # fmt: skip
        model = transformers.Qwen2ForCausalLM(cfg).float().eval()
    lms = [HFCausalLM(model, max_requests=3, max_seq_len=64, attention=a) for a in ("gather", "rows")]
    in_place = []  # query tokens of each forward the in-place kernel served
    kernel = kv_rows.decode_attention
    monkeypatch.setattr(kv_rows, "decode_attention", lambda q, *a: in_place.append(q.shape[1]) or kernel(q, *a))
    rows = torch.tensor([2, 0])
    steps = [(torch.randint(0, 256, (2, 40)), torch.arange(40).expand(2, 40))]  # 2 x 40 query rows: SDPA
    for s in range(3):  # verify-shaped forwards: 4 tokens at different positions per request
        start = torch.tensor([40 + 4 * s, 40 + 4 * s + 1])
        steps.append((torch.randint(0, 256, (2, 4)), start[:, None] + torch.arange(4)))
    for tokens, positions in steps:
        (a, ha), (b, hb) = (lm(tokens, positions, rows) for lm in lms)
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(hb, ha, rtol=1e-4, atol=1e-4)
    assert in_place == [4] * 6  # two layers, three verify forwards; the long prefill fell back


def test_attention_choice():
    llama_model = llama(32, 1, 2, 1, seed=0)
    assert HFCausalLM(llama_model, max_requests=2, max_seq_len=32).attention == "rows"
    torch.manual_seed(0)
    cfg = transformers.Gemma2Config(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
    )  # fmt: skip
    gemma2 = transformers.Gemma2ForCausalLM(cfg).eval()  # eager attention with soft-capping
    assert HFCausalLM(gemma2, max_requests=2, max_seq_len=32).attention == "gather"
    with pytest.raises(ValueError, match="cannot serve Gemma2ForCausalLM"):
        HFCausalLM(gemma2, max_requests=2, max_seq_len=32, attention="rows")
    with pytest.raises(ValueError, match="attention='paged'"):
        HFCausalLM(llama_model, max_requests=2, max_seq_len=32, attention="paged")


def test_target_as_its_own_draft_accepts_everything():
    target = llama(64, 2, 4, 2, seed=0)
    twin = llama(64, 2, 4, 2, seed=0)
    cfg = RunnerConfig(toggles=Toggles.all(False))
    dec = hf_spec_decoder(target, twin, max_requests=4, max_seq_len=96, config=cfg, attention="gather")
    dec.generate(PROMPTS, max_new_tokens=17)
    assert dec.stats.mean_accept_len == pytest.approx(4.0)


class _Tokens:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def test_vocabularies_must_match_or_pad_one_tokenizer():
    with pytest.raises(ValueError, match="vocabularies differ.*pass tokenizer"):
        hf_spec_decoder(llama(32, 1, 2, 1, 0, vocab=256), llama(32, 1, 2, 1, 1, vocab=300))
    with pytest.raises(ValueError, match="the tokenizer has 280 tokens, more than 256"):
        hf_spec_decoder(llama(32, 1, 2, 1, 0, vocab=256), llama(32, 1, 2, 1, 1, vocab=300), tokenizer=_Tokens(280))


@pytest.mark.parametrize("draft_vocab", [232, 300], ids=["draft-smaller", "draft-larger"])
def test_vocabularies_padded_to_two_sizes_over_one_tokenizer(draft_vocab, monkeypatch):
    """A Qwen2.5-7B / 0.5B-like pair: one tokenizer of 230 ids, the target padded to 256 rows, the draft to
    fewer or more. Greedy output is the target's; the target's padding ids (its random weights emit
    them) reach the draft as its last row, and the draft proposes target ids only."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    target, draft = llama(64, 2, 2, 1, seed=0), llama(32, 1, 2, 1, seed=1, vocab=draft_vocab)
    dec = hf_spec_decoder(target, draft, max_requests=3, max_seq_len=64, attention="gather", tokenizer=_Tokens(230))
    prompts = PROMPTS + [[250, 255, 240]]  # ids past the draft's rows
    assert dec.generate(prompts, max_new_tokens=8) == [hf_greedy(target, p, 8) for p in prompts]


@pytest.mark.slow  # torch.compile of two models on two cores: about 40 s
def test_compiled_forwards_give_the_uncompiled_output():
    """compile= reaches the HF forwards (the adapter's cache writes and gather trace through torch.compile);
    the aot_eager backend keeps eager kernels, so the output is the uncompiled decoder's exactly."""
    target, draft = llama(64, 2, 4, 2, seed=0), llama(32, 1, 2, 1, seed=1)
    cfg = RunnerConfig(toggles=Toggles.all(False).with_piece("compile_forwards", True))
    size = {"max_requests": 4, "max_seq_len": 96, "config": cfg, "attention": "gather"}
    plain = hf_spec_decoder(target, draft, **size).generate(PROMPTS, max_new_tokens=8)
    dec = hf_spec_decoder(target, draft, **size, compile="aot_eager")
    assert dec.generate(PROMPTS, max_new_tokens=8) == plain
    info = dec.info()["compile"]
    assert info["target"]["compiles"] >= 1 and info["target"]["failures"] == info["draft"]["failures"] == 0


class EagleHead(torch.nn.Module):
    """A stateless EAGLE-style head over the target's embeddings and LM head: one projection of the token's
    embedding and the feature (the target's hidden state, or its own last output)."""

    def __init__(self, target) -> None:
        super().__init__()
        D = target.config.hidden_size
        self.embed, self.lm_head = target.model.embed_tokens, target.lm_head
        self.fc = torch.nn.Linear(2 * D, D)
        self.hidden_size, self.seen = D, []

    def forward(self, tokens, positions, hidden, cache_rows):
        self.seen.append(hidden.detach().clone())
        h = self.fc(torch.cat([self.embed(tokens), hidden], -1))
        return self.lm_head(h), h


def test_an_eagle_head_gets_the_targets_hidden_states(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    target = llama(64, 2, 2, 1, seed=0)
    head = EagleHead(target)
    dec = hf_spec_decoder(target, head, max_requests=3, max_seq_len=64, attention="gather", prefill_chunk=None)
    assert dec.generate(PROMPTS, max_new_tokens=8) == [hf_greedy(target, p, 8) for p in PROMPTS]
    with torch.no_grad():
        want = target.model(torch.tensor([PROMPTS[0]])).last_hidden_state  # the LM head's input
    torch.testing.assert_close(head.seen[0][:, 1:], want)  # prefill: the prompt's features, shifted by one
    assert torch.equal(head.seen[0][:, 0], torch.zeros_like(want[:, 0]))
    with pytest.raises(TypeError, match="an EAGLE-style head: a callable"):
        hf_spec_decoder(target, object(), max_requests=3, max_seq_len=64)


@pytest.mark.parametrize("prefill_chunk, forwards", [(PREFILL_CHUNK, 1), (None, 4), ("auto", 4)])
def test_a_batchs_prompts_are_prefilled_together_in_chunks(prefill_chunk, forwards):
    """As ``model.generate()`` does: one forward of each model for the batch's prompts, not one per prompt
    (each an eager forward) as ``prefill_chunk=None`` asks, and ``"auto"`` on a CPU; the same tokens."""
    target, draft = llama(64, 2, 4, 2, seed=0), llama(32, 1, 2, 1, seed=1)
    kw = {"prefill_chunk": prefill_chunk}
    dec = hf_spec_decoder(target, draft, max_requests=4, max_seq_len=64, config=RunnerConfig(progress=False), **kw)
    prompts = [*PROMPTS, [9, 9, 3]]  # four: one chunk forward's size
    want = [hf_greedy(target, p, 1) for p in prompts]
    dec.warmup()
    calls = []
    for name, model in (("target", target), ("draft", draft)):
        model.register_forward_pre_hook(lambda module, args, name=name: calls.append(name))
    assert dec.generate(prompts, max_new_tokens=1) == want
    assert calls.count("target") == forwards and calls.count("draft") == forwards, calls


def test_auto_prefill_chunks_where_graphs_are_captured():
    assert default_prefill_chunk(torch.device("cuda", 0)) == PREFILL_CHUNK
    assert default_prefill_chunk(torch.device("cpu")) is None
    with pytest.raises(ValueError, match="prefill_chunk='whole'"):
        hf_spec_decoder(llama(64, 2, 4, 2, seed=0), "prompt_lookup", prefill_chunk="whole")
