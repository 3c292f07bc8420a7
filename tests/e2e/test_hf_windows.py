"""Sliding-window and chunked attention through the Hugging Face adapter: every family with a window (or
chunks: Llama 4), sequences well past it (5 positions), greedy output and logits equal to the model's own
(float32, CPU); layer types the adapter cannot honour are refused at construction, naming them."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from stepgraph import RunnerConfig, Toggles  # noqa: E402
from stepgraph.adapters.hf import TESTED_WINDOWED_FAMILIES, HFCausalLM, hf_spec_decoder  # noqa: E402
from stepgraph.adapters.hf_masks import attention_masks  # noqa: E402

WINDOW = 5
SMALL = dict(
    vocab_size=256, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=256, sliding_window=WINDOW,
)  # fmt: skip
MIXED = ["sliding_attention", "full_attention"]  # layer types, for the families that alternate them
MOE = dict(num_local_experts=4, num_experts_per_tok=2)
CONFIGS = {  # name -> config of n layers
    "Mistral": lambda n: transformers.MistralConfig(**SMALL, num_hidden_layers=n),
    "Mixtral": lambda n: transformers.MixtralConfig(**SMALL, **MOE, num_hidden_layers=n),
    "Phi3": lambda n: transformers.Phi3Config(**SMALL, pad_token_id=0, num_hidden_layers=n),
    "Starcoder2": lambda n: transformers.Starcoder2Config(**SMALL, num_hidden_layers=n),
    "Qwen2": lambda n: transformers.Qwen2Config(**SMALL, use_sliding_window=True, max_window_layers=n - 1,
                                                num_hidden_layers=n),
    "Qwen3": lambda n: transformers.Qwen3Config(**SMALL, head_dim=16, use_sliding_window=True,
                                                max_window_layers=n - 1, num_hidden_layers=n),
    "Gemma2": lambda n: transformers.Gemma2Config(**SMALL, head_dim=16, layer_types=MIXED[:n], num_hidden_layers=n),
    "Gemma3": lambda n: transformers.Gemma3TextConfig(**SMALL, head_dim=16, layer_types=MIXED[:n],
                                                      num_hidden_layers=n),
    "Cohere2": lambda n: transformers.Cohere2Config(**SMALL, layer_types=MIXED[:n], num_hidden_layers=n),
    "GptOss": lambda n: transformers.GptOssConfig(**SMALL, head_dim=16, layer_types=MIXED[:n], **MOE,
                                                  num_hidden_layers=n),
    "Llama4": lambda n: transformers.Llama4TextConfig(**SMALL, head_dim=16, intermediate_size_mlp=128,
                                                      num_local_experts=2, attention_chunk_size=WINDOW,
                                                      no_rope_layers=[1, 0][:n], num_hidden_layers=n),
}  # fmt: skip
WINDOWED_FAMILIES = tuple(CONFIGS)
assert WINDOWED_FAMILIES == TESTED_WINDOWED_FAMILIES  # the adapter's list is this file's


def windowed(name: str, layers: int = 2, seed: int = 0):
    torch.manual_seed(seed)
    cfg = CONFIGS[name](layers)
    # Gemma 2 soft-caps attention and gpt-oss has attention sinks: eager attention only
    cfg._attn_implementation = "eager" if name in ("Gemma2", "GptOss") else "sdpa"
    model = (
        transformers.Gemma3ForCausalLM(cfg) if name == "Gemma3" else transformers.AutoModelForCausalLM.from_config(cfg)
    )
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model.float().eval()


PROMPT = [5, 17, 99, 3, 42, 7, 61, 2]
NEW = 12  # prompt and output: four windows long


@pytest.mark.parametrize("name", WINDOWED_FAMILIES)
def test_greedy_equals_generate_past_the_window(name):
    target, draft = windowed(name, seed=0), windowed(name, layers=1, seed=1)
    assert WINDOW in [span.size for span in attention_masks(target, target.model).spans.values() if span]
    cfg = RunnerConfig(toggles=Toggles.all(True), progress=False)
    dec = hf_spec_decoder(target, draft, max_requests=2, max_seq_len=32, num_draft_tokens=2, config=cfg,
                          attention="gather")  # fmt: skip
    prompts = [PROMPT, [9, 8]]
    out = dec.generate(prompts, max_new_tokens=NEW)
    for prompt, got in zip(prompts, out):
        ids = torch.tensor([prompt])
        ref = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False)
        assert got == ref[0, len(prompt) :].tolist(), name


LOGITS_CASES = [(name, "gather") for name in WINDOWED_FAMILIES] + [(n, "rows") for n in ("Mistral", "Qwen2", "Llama4")]


@pytest.mark.parametrize("name,attention", LOGITS_CASES, ids=[f"{n}-{a}" for n, a in LOGITS_CASES])
def test_logits_past_the_window_are_the_models_own(name, attention):
    """A prefill of three windows and a decode step after it give the model's own logits. ``rows``: the
    in-place kernel for full layers, the gathered rows for the others (Mistral: every layer windowed;
    Qwen2: one of each; Llama 4: a chunked layer and a full one)."""
    model = windowed(name)
    lm = HFCausalLM(model, max_requests=2, max_seq_len=32, attention=attention)
    assert lm.attention == attention
    ids = torch.tensor([PROMPT * 2])
    rows = torch.tensor([1])
    prefill, _ = lm(ids, torch.arange(ids.shape[1])[None], rows)
    step, _ = lm(torch.tensor([[11]]), torch.tensor([[ids.shape[1]]]), rows)
    with torch.no_grad():  # the model's own forward (which keeps the adapter's attention: SDPA outside it)
        ref = model(torch.cat([ids, torch.tensor([[11]])], 1)).logits
    torch.testing.assert_close(prefill, ref[:, :-1], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(step, ref[:, -1:], rtol=1e-4, atol=1e-4)


def test_a_window_the_forward_does_not_build_is_not_applied():
    """OLMoE hands ``sliding_window`` to flash kernels only: under SDPA it attends to every position, and
    so does the adapter."""
    torch.manual_seed(0)
    cfg = transformers.OlmoeConfig(**SMALL, num_experts=4, num_experts_per_tok=2)
    cfg.num_hidden_layers = 1
    model = transformers.AutoModelForCausalLM.from_config(cfg).float().eval()
    assert attention_masks(model, model.model).spans == {"full_attention": None}
    lm = HFCausalLM(model, max_requests=1, max_seq_len=32, attention="gather")
    ids = torch.tensor([PROMPT * 2])
    logits, _ = lm(ids, torch.arange(ids.shape[1])[None], torch.tensor([0]))
    with torch.no_grad():
        torch.testing.assert_close(logits, model(ids).logits, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda c: setattr(c, "layer_types", ["full_attention", "linear_attention"]), "'linear_attention'"),
        (lambda c: setattr(c, "layer_types", ["full_attention", "chunked_attention"]), "attention_chunk_size is None"),
        (lambda c: setattr(c, "sliding_window", None), "sliding_window is None"),
    ],
    ids=["unknown-layer-type", "no-chunk-size", "no-window-size"],
)
def test_attention_it_cannot_honour_is_refused_at_construction(change, match):
    model = windowed("Qwen2")
    change(model.config)
    with pytest.raises(ValueError, match=match):
        HFCausalLM(model, max_requests=1, max_seq_len=32)


def test_mixed_layers_need_a_forward_that_takes_a_mask_per_type():
    model = windowed("Mistral")
    model.config.layer_types = MIXED  # Mistral's forward builds one mask for every layer
    with pytest.raises(ValueError, match="does not take one mask per layer type"):
        HFCausalLM(model, max_requests=1, max_seq_len=32)
