"""The Hugging Face adapter across model families (small random models, float32, CPU): its logits are the
model's own logits, greedy speculative output equals ``generate()``, and stopping follows the model's
generation config."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from stepgraph import RunnerConfig, Toggles  # noqa: E402
from stepgraph.adapters.hf import TESTED_FAMILIES, HFCausalLM, hf_spec_decoder  # noqa: E402
from tests.helpers import hf_greedy  # noqa: E402

SMALL = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_attention_heads=4, max_position_embeddings=256)


def family(name: str, layers: int = 2, seed: int = 0):
    torch.manual_seed(seed)
    kv = dict(num_key_value_heads=2)
    configs = {
        "Llama": lambda: transformers.LlamaConfig(**SMALL, **kv),
        "Qwen2": lambda: transformers.Qwen2Config(**SMALL, **kv),
        "Qwen3": lambda: transformers.Qwen3Config(**SMALL, **kv, head_dim=16),
        "Mistral": lambda: transformers.MistralConfig(**SMALL, **kv),
        "Gemma": lambda: transformers.GemmaConfig(**SMALL, **kv, head_dim=16),
        "Gemma2": lambda: transformers.Gemma2Config(**SMALL, **kv, head_dim=16, final_logit_softcapping=2.0),
        "Gemma3": lambda: transformers.Gemma3TextConfig(**SMALL, **kv, head_dim=16),
        "Olmo": lambda: transformers.OlmoConfig(**SMALL, **kv),
        "Granite": lambda: transformers.GraniteConfig(**SMALL, **kv, logits_scaling=4.0),
        "Cohere": lambda: transformers.CohereConfig(**SMALL, **kv, logit_scale=0.5),
        "OPT": lambda: transformers.OPTConfig(
            vocab_size=256,
            hidden_size=64,
            ffn_dim=128,
            num_attention_heads=4,
            max_position_embeddings=256,
            word_embed_proj_dim=64,
        ),  # fmt: skip
        "GPT2": lambda: transformers.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=256),
        "GPTNeoX": lambda: transformers.GPTNeoXConfig(**SMALL),
        "Falcon": lambda: transformers.FalconConfig(vocab_size=256, hidden_size=64, num_attention_heads=4),
        "Phi": lambda: transformers.PhiConfig(**SMALL),
    }
    cfg = configs[name]()
    cfg.num_hidden_layers = layers
    cfg._attn_implementation = "eager" if name == "Gemma2" else "sdpa"  # Gemma 2 soft-caps attention: eager only
    if name == "Gemma3":
        model = transformers.Gemma3ForCausalLM(cfg)
    else:
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    model.generation_config.eos_token_id = None  # random weights: no early stop unless a test sets one
    model.generation_config.pad_token_id = 0
    return model.float().eval()


PROMPT = [5, 17, 99, 3, 42, 7]


@pytest.mark.parametrize("attention", ["auto", "gather"])
@pytest.mark.parametrize("name", TESTED_FAMILIES)
def test_adapter_logits_are_the_models_own(name, attention):
    model = family(name)
    lm = HFCausalLM(model, max_requests=2, max_seq_len=64, attention=attention)
    ids = torch.tensor([PROMPT])
    rows = torch.tensor([1])
    logits, hidden = lm(ids, torch.arange(len(PROMPT))[None], rows)  # prefill into cache row 1
    nxt = torch.tensor([[11]])
    step, _ = lm(nxt, torch.tensor([[len(PROMPT)]]), rows)  # one cached decode step
    with torch.no_grad():
        ref = model(torch.cat([ids, nxt], 1)).logits
    assert hidden.shape == (1, len(PROMPT), model.config.hidden_size)
    torch.testing.assert_close(logits, ref[:, :-1], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(step, ref[:, -1:], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", TESTED_FAMILIES)
def test_greedy_equals_generate(name):
    target, draft = family(name, seed=0), family(name, layers=1, seed=1)
    cfg = RunnerConfig(toggles=Toggles.all(True), progress=False)
    size = {"max_requests": 2, "max_seq_len": 64}  # the gather: rows in place are covered by the logits test
    dec = hf_spec_decoder(target, draft, **size, num_draft_tokens=2, config=cfg, attention="gather")
    prompts = [PROMPT, [9, 8]]
    out = dec.generate(prompts, max_new_tokens=10)
    assert out == [hf_greedy(target, p, 10) for p in prompts], name


def test_stopping_follows_the_generation_config():
    target, draft = family("Llama"), family("Llama", layers=1, seed=1)
    ids = torch.tensor([PROMPT])
    free = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)[0]
    new = free[len(PROMPT) :].tolist()
    target.generation_config.eos_token_id = [new[7], new[3]]  # a list, as generation configs carry
    want = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)[0]
    size = {"max_requests": 2, "max_seq_len": 64, "attention": "gather"}  # the stopping rule, not the attention
    dec = hf_spec_decoder(target, draft, **size, config=RunnerConfig(progress=False))
    assert dec.eos_token_id == (new[7], new[3])
    assert dec.generate([PROMPT], max_new_tokens=12)[0] == want[len(PROMPT) :].tolist()
    none = hf_spec_decoder(target, draft, **size, eos_token_id=None)
    assert none.generate([PROMPT], max_new_tokens=12)[0] == new  # None: no early stop


@pytest.mark.parametrize(
    "make",
    [
        lambda: transformers.T5ForConditionalGeneration(
            transformers.T5Config(vocab_size=256, d_model=32, d_ff=64, num_layers=1, num_heads=2, d_kv=16)
        ),
    ],
    ids=["t5"],
)
def test_unsupported_models_are_refused_at_construction(make):
    with pytest.raises(ValueError, match="tested families: Llama"):
        HFCausalLM(make(), max_requests=2, max_seq_len=32)


def test_generation_config_ids_outside_the_vocabulary_are_named():
    target, draft = family("GPT2"), family("GPT2", layers=1, seed=1)
    target.generation_config.eos_token_id = 50256  # GPT-2's, beyond this small vocabulary
    with pytest.raises(ValueError, match="generation_config.eos_token_id 50256"):
        hf_spec_decoder(target, draft, max_requests=2, max_seq_len=64)
    assert hf_spec_decoder(target, draft, max_requests=2, max_seq_len=64, eos_token_id=None).eos_token_id == ()
