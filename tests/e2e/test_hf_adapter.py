"""HF adapter: speculative greedy output equals the target's own greedy generate() (float32, CPU)."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from stepgraph import RunnerConfig, Toggles  # noqa: E402
from stepgraph.adapters.hf import hf_spec_decoder  # noqa: E402


def llama(hidden, layers, heads, kv_heads, seed, vocab=256):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=256,
        attn_implementation="sdpa", pad_token_id=0,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(cfg).float().eval()


PROMPTS = [[5, 17, 99, 3], [42, 7, 7, 8, 200, 31, 9], [1, 2]]


@pytest.mark.parametrize("toggles", [Toggles.all(True), Toggles.all(False)], ids=["pieces-on", "plain"])
def test_greedy_equals_hf_generate(toggles):
    target, draft = llama(64, 2, 4, 2, seed=0), llama(32, 1, 2, 1, seed=1)
    dec = hf_spec_decoder(target, draft, max_requests=4, max_seq_len=96, config=RunnerConfig(toggles=toggles))
    out = dec.generate(PROMPTS, max_new_tokens=20)
    for prompt, got in zip(PROMPTS, out):
        ids = torch.tensor([prompt])
        ref = target.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=20, do_sample=False, eos_token_id=None
        )
        assert got == ref[0, len(prompt) :].tolist()
    assert 1.0 <= dec.stats.mean_accept_len <= 4.0


def test_target_as_its_own_draft_accepts_everything():
    target = llama(64, 2, 4, 2, seed=0)
    twin = llama(64, 2, 4, 2, seed=0)
    dec = hf_spec_decoder(target, twin, max_requests=4, max_seq_len=96, config=RunnerConfig(toggles=Toggles.all(False)))
    dec.generate(PROMPTS, max_new_tokens=17)
    assert dec.stats.mean_accept_len == pytest.approx(4.0)


def test_vocabularies_must_match():
    with pytest.raises(ValueError, match="vocabularies differ"):
        hf_spec_decoder(llama(32, 1, 2, 1, 0, vocab=256), llama(32, 1, 2, 1, 1, vocab=300))
