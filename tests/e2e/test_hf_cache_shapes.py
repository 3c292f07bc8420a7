"""The Hugging Face adapter's cache takes its shapes from the model's layers, not its config: a config head
count the layers ignore (GPT-NeoX), keys and values of different widths (DeepSeek-V3's latent attention).
Greedy output equals ``generate()`` (float32, CPU)."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from stepgraph import RunnerConfig  # noqa: E402
from stepgraph.adapters.hf import HFCausalLM, cache_shapes, hf_spec_decoder  # noqa: E402
from tests.helpers import hf_greedy  # noqa: E402


def neox(layers, seed):
    torch.manual_seed(seed)
    cfg = transformers.GPTNeoXConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_hidden_layers=layers,
        max_position_embeddings=256,
    )  # fmt: skip
    cfg.num_key_value_heads = 2  # carried by the config, ignored by GPT-NeoX's layers (4 heads each)
    return transformers.AutoModelForCausalLM.from_config(cfg).float().eval()


def deepseek_v3(layers, seed):
    torch.manual_seed(seed)
    cfg = transformers.DeepseekV3Config(
        vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_attention_heads=4,
        num_key_value_heads=4, num_hidden_layers=layers, max_position_embeddings=256, q_lora_rank=32,
        kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, n_routed_experts=4,
        num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1,
    )  # fmt: skip
    return transformers.AutoModelForCausalLM.from_config(cfg).float().eval()


MODELS = {"GPTNeoX": neox, "DeepseekV3": deepseek_v3}
PROMPT = [5, 17, 99, 3, 42, 7]


@pytest.mark.parametrize("name", list(MODELS))
def test_greedy_equals_generate_with_the_layers_own_cache_shapes(name):
    target, draft = MODELS[name](2, seed=0), MODELS[name](1, seed=1)
    for model in (target, draft):
        model.generation_config.eos_token_id = None
    dec = hf_spec_decoder(target, draft, max_requests=2, max_seq_len=48, num_draft_tokens=2, attention="gather",
                          config=RunnerConfig(progress=False))  # fmt: skip
    prompts = [PROMPT, [9, 8]]
    out = dec.generate(prompts, max_new_tokens=8)
    assert out == [hf_greedy(target, p, 8) for p in prompts], name


def test_shapes_are_measured_per_layer():
    lm = HFCausalLM(neox(2, seed=0), max_requests=2, max_seq_len=16, attention="gather")
    assert cache_shapes(lm.model, lm._cache_kw, lm.masks) == {0: (4, 16, 16), 1: (4, 16, 16)}
    assert lm.cache.kv[0].shape == (3, 2, 4, 16, 16)  # rows + the scratch row, keys and values, heads, S, dim
    latent = HFCausalLM(deepseek_v3(2, seed=0), max_requests=2, max_seq_len=16, attention="gather")
    (heads, key_dim, value_dim), *_ = latent.cache.shapes.values()
    assert (key_dim, value_dim) == (16, 8) and latent.cache.kv[0].shape[-1] == 16  # the wider, values padded


def test_in_place_attention_is_refused_for_latent_attention(monkeypatch):
    model = deepseek_v3(1, seed=0)
    monkeypatch.setattr(model.config, "_attn_implementation", "sdpa")
    with pytest.raises(ValueError, match="differ in width"):
        HFCausalLM(model, max_requests=1, max_seq_len=16, attention="rows")
    assert HFCausalLM(model, max_requests=1, max_seq_len=16, attention="auto").attention == "gather"
