"""EAGLE-3 heads loaded from checkpoints written here in the published format (random weights, small
shapes): the loaded head's forward equals a hand-written reference, step by step, and decoding with it
is exact; checkpoints that do not fit the target are refused, naming what is wrong."""

import json
import math

import pytest
import torch

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from stepgraph.adapters.hf import hf_spec_decoder  # noqa: E402
from stepgraph.drafts import load_eagle  # noqa: E402
from tests.e2e.test_hf_adapter import llama  # noqa: E402
from tests.helpers import hf_greedy  # noqa: E402

H, V, VD, TAPS = 32, 128, 48, [1, 3, 4]


@pytest.fixture(autouse=True)
def _torch_paths(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")


@pytest.fixture(scope="module")
def target():
    return llama(H, 6, 4, 2, seed=0, vocab=V)


def head_weights(seed=1, bias=False, hidden=H, target_hidden=H):
    g = torch.Generator().manual_seed(seed)

    def rand(*shape, std=0.3):
        return torch.randn(*shape, generator=g) * std

    heads, kv, hd, inter = 4, 2, hidden // 4, 2 * hidden
    w = {
        "fc.weight": rand(hidden, 3 * target_hidden),
        "midlayer.self_attn.q_proj.weight": rand(heads * hd, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": rand(kv * hd, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": rand(kv * hd, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": rand(hidden, heads * hd),
        "midlayer.mlp.gate_proj.weight": rand(inter, hidden),
        "midlayer.mlp.up_proj.weight": rand(inter, hidden),
        "midlayer.mlp.down_proj.weight": rand(hidden, inter),
        "midlayer.input_layernorm.weight": 1 + rand(hidden, std=0.1),
        "midlayer.hidden_norm.weight": 1 + rand(hidden, std=0.1),
        "midlayer.post_attention_layernorm.weight": 1 + rand(hidden, std=0.1),
        "norm.weight": 1 + rand(hidden, std=0.1),
        "lm_head.weight": rand(VD, hidden, std=1.0),
        "t2d": torch.zeros(V, dtype=torch.bool),
    }
    ids = torch.sort(torch.randperm(V, generator=g)[:VD]).values  # the draft vocabulary's target ids
    w["d2t"] = ids - torch.arange(VD)
    if bias:
        w |= {f"midlayer.self_attn.{p}_proj.bias": rand(n) for p, n in (("q", H), ("k", H // 2), ("v", H // 2))}
    return w


def write(path, weights, *, fmt="safetensors", **config):
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"], "hidden_size": H, "intermediate_size": 2 * H,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1, "vocab_size": V,
        "draft_vocab_size": VD, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 256,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": TAPS},
    } | config  # fmt: skip
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))
    if fmt == "safetensors":
        safetensors_torch.save_file({n: t.contiguous() for n, t in weights.items()}, path / "model.safetensors")
    else:  # the other naming: layers.0.* under a model. prefix, in pytorch_model.bin
        torch.save(
            {"model." + n.replace("midlayer.", "layers.0."): t for n, t in weights.items()}, path / "pytorch_model.bin"
        )
    return path


def rms(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def rope(x, theta=10000.0):
    """x [T, heads, hd] rotated by its positions 0..T-1 (the rotate-half convention)."""
    T, _, hd = x.shape
    inv = 1.0 / theta ** (torch.arange(0, hd, 2).float() / hd)
    ang = torch.arange(T).float()[:, None] * inv[None]
    cos, sin = torch.cat([ang.cos()] * 2, -1)[:, None], torch.cat([ang.sin()] * 2, -1)[:, None]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def head_reference(w, embed, tokens, features, norm_before_residual=False):
    """The head over positions 0..T-1 at once, no cache: logits [T, V] at the target ids, and the
    pre-norm outputs [T, H]. ``features``: per position the target's three states [3H] or a draft's [H]."""
    h = torch.stack([f @ w["fc.weight"].T if f.shape[-1] == 3 * H else f for f in features])
    normed = rms(h, w["midlayer.hidden_norm.weight"])
    residual = normed if norm_before_residual else h
    x = torch.cat([rms(embed[tokens], w["midlayer.input_layernorm.weight"]), normed], -1)
    T = len(tokens)

    def proj(name):
        return x @ w[f"midlayer.self_attn.{name}_proj.weight"].T + w.get(f"midlayer.self_attn.{name}_proj.bias", 0)

    q, k, v = proj("q").view(T, 4, 8), proj("k").view(T, 2, 8), proj("v").view(T, 2, 8)
    q, k = rope(q), rope(k)
    k, v = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    scores = torch.einsum("thd,shd->hts", q, k) / math.sqrt(8)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    attn = torch.einsum("hts,shd->thd", scores.softmax(-1), v).reshape(T, -1)
    h1 = residual + attn @ w["midlayer.self_attn.o_proj.weight"].T
    m = rms(h1, w["midlayer.post_attention_layernorm.weight"])
    gate, up = m @ w["midlayer.mlp.gate_proj.weight"].T, m @ w["midlayer.mlp.up_proj.weight"].T
    out = h1 + (torch.nn.functional.silu(gate) * up) @ w["midlayer.mlp.down_proj.weight"].T
    logits = torch.full((T, V), float("-inf"))
    logits[:, torch.arange(VD) + w["d2t"]] = rms(out, w["norm.weight"]) @ w["lm_head.weight"].T
    return logits, out


def taps_of(model, tokens):
    with torch.no_grad():
        states = model(torch.tensor([tokens]), output_hidden_states=True).hidden_states
    return torch.cat([states[i] for i in TAPS], -1)[0]  # [T, 3H]: the stream entering each tapped layer


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
@pytest.mark.parametrize("norm_before_residual", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_the_loaded_heads_forward_is_the_reference_step_by_step(target, tmp_path, fmt, norm_before_residual, bias):
    w = head_weights(bias=bias)
    path = write(tmp_path / "head", w, fmt=fmt, norm_before_residual=norm_before_residual, bias=bias)
    head = load_eagle(path, target, max_requests=2, max_seq_len=64)
    assert head.taps == tuple(TAPS) and head.hidden_size == H
    prompt = [5, 17, 99, 3, 42, 7, 8]
    embed = target.get_input_embeddings().weight.detach()
    # the prompt: position p reads the target's states at p - 1 (zeros at 0), as prefill feeds it
    aux = taps_of(target, prompt)
    features = [torch.zeros(3 * H)] + list(aux[:-1])
    tokens = torch.tensor([prompt])
    with torch.no_grad():
        logits, out = head(tokens, torch.arange(len(prompt))[None], torch.stack(features)[None], torch.tensor([1]))
        ref_logits, ref_out = head_reference(w, embed, tokens[0], features, norm_before_residual)
        torch.testing.assert_close(logits[0], ref_logits, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out[0], ref_out, rtol=1e-5, atol=1e-5)
        # two draft steps: each reads the step before's token and pre-norm output, from its cache
        for _ in range(2):
            token = int(logits[0, -1].argmax())
            assert token == int(ref_logits[-1].argmax()) and token in (torch.arange(VD) + w["d2t"]).tolist()
            tokens = torch.cat([tokens, torch.tensor([[token]])], 1)
            features.append(out[0, -1])
            n = tokens.shape[1] - 1
            logits, out = head(tokens[:, -1:], torch.tensor([[n]]), out[:, -1:], torch.tensor([1]))
            ref_logits, ref_out = head_reference(w, embed, tokens[0], features, norm_before_residual)
            torch.testing.assert_close(logits[0, -1], ref_logits[-1], rtol=1e-5, atol=1e-5)
            assert torch.isinf(logits[0, -1]).sum() == V - VD  # -inf outside the draft vocabulary


@pytest.mark.parametrize("chunk", [None, 5], ids=["whole", "chunked"])
@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
def test_decoding_with_a_loaded_head_is_exact(target, tmp_path, chunk, overlap):
    head = load_eagle(write(tmp_path / "head", head_weights()), target, max_requests=3, max_seq_len=96)
    dec = hf_spec_decoder(target, head, max_requests=3, max_seq_len=96, attention="gather", prefill_chunk=chunk)
    assert dec.step.runner is not None and dec.draft.hidden_size == H
    prompts = [[5, 17, 99, 3], [42, 7, 7, 8, 200 % V, 31, 9], [1, 2]]
    out = dec.generate(prompts, max_new_tokens=16, eos_token_id=None, overlap=overlap)
    assert out == [hf_greedy(target, p, 16, eos_token_id=None) for p in prompts]


def test_checkpoints_that_do_not_fit_are_refused(target, tmp_path):
    w = head_weights()
    cases = [
        ({"target_hidden_size": 48}, w, "hidden states of 48"),
        ({"vocab_size": 200}, w, "vocab_size is 200"),
        ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 6]}}, w, r"taps \(1, 3, 6\)"),
        ({}, {n: t for n, t in w.items() if n != "norm.weight"}, r"no tensor norm.weight \(expected shape \[32\]\)"),
        ({}, w | {"fc.weight": torch.zeros(H, 4 * H)}, r"fc.weight has shape \[32, 128\], expected \[32, 96\]"),
        ({}, w | {"d2t": w["d2t"] + V}, "d2t maps draft ids outside"),
    ]
    for i, (config, weights, message) in enumerate(cases):
        with pytest.raises(ValueError, match=message):
            load_eagle(write(tmp_path / str(i), weights, **config), target)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="config.json has no hidden_size, num_attention_heads, intermediate_size"):
        load_eagle(tmp_path / "empty", target)
    write(tmp_path / "bare", w).joinpath("model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors and no pytorch_model.bin"):
        load_eagle(tmp_path / "bare", target)
    head = load_eagle(write(tmp_path / "ok", w), target, max_requests=2, max_seq_len=64)
    with pytest.raises(ValueError, match="load it with max_requests=4, max_seq_len=96"):
        hf_spec_decoder(target, head, max_requests=4, max_seq_len=96)


def eagle1_weights(seed=2):
    """An EAGLE-1/2 head: fc over cat(embed, hidden) with a bias, layers.0.* without an input layernorm,
    no final norm and no head of its own."""
    w = {n: t for n, t in head_weights(seed).items() if n.startswith("midlayer.") and "input_layernorm" not in n}
    w = {n: t for n, t in w.items() if "hidden_norm" not in n}
    w["midlayer.self_attn.q_proj.weight"] = w["midlayer.self_attn.q_proj.weight"][:, :H]
    w["midlayer.self_attn.k_proj.weight"] = w["midlayer.self_attn.k_proj.weight"][:, :H]
    w["midlayer.self_attn.v_proj.weight"] = w["midlayer.self_attn.v_proj.weight"][:, :H]
    g = torch.Generator().manual_seed(seed)
    w["fc.weight"], w["fc.bias"] = torch.randn(H, 2 * H, generator=g) * 0.3, torch.randn(H, generator=g) * 0.1
    return w


def eagle1_reference(w, target, tokens, features):
    """The EAGLE-1 head over positions 0..T-1 at once, no cache: the target's logits of its outputs."""
    embed, head = target.get_input_embeddings().weight.detach(), target.get_output_embeddings().weight.detach()
    h = torch.cat([embed[tokens], torch.stack(features)], -1) @ w["fc.weight"].T + w["fc.bias"]
    T = len(tokens)
    q = (h @ w["midlayer.self_attn.q_proj.weight"].T).view(T, 4, 8)
    k = (h @ w["midlayer.self_attn.k_proj.weight"].T).view(T, 2, 8)
    v = (h @ w["midlayer.self_attn.v_proj.weight"].T).view(T, 2, 8)
    q, k = rope(q), rope(k)
    k, v = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    scores = torch.einsum("thd,shd->hts", q, k) / math.sqrt(8)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    h1 = (
        h + torch.einsum("hts,shd->thd", scores.softmax(-1), v).reshape(T, -1) @ w["midlayer.self_attn.o_proj.weight"].T
    )
    m = rms(h1, w["midlayer.post_attention_layernorm.weight"])
    gate, up = m @ w["midlayer.mlp.gate_proj.weight"].T, m @ w["midlayer.mlp.up_proj.weight"].T
    out = h1 + (torch.nn.functional.silu(gate) * up) @ w["midlayer.mlp.down_proj.weight"].T
    return out @ head.T, out


def final_hidden(model, tokens):
    with torch.no_grad():
        return model(torch.tensor([tokens]), output_hidden_states=True).hidden_states[-1][0]  # post-norm


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_an_eagle1_head_is_its_reference_step_by_step_and_decodes_exactly(target, tmp_path, fmt):
    from stepgraph.drafts import EagleDraft

    w = eagle1_weights()
    head = load_eagle(write(tmp_path / "head", w, fmt=fmt, eagle_config=None), target, max_requests=3, max_seq_len=96)
    assert isinstance(head, EagleDraft) and head.taps is None and head.hidden_size == H
    prompt = [5, 17, 99, 3, 42, 7, 8]
    features = [torch.zeros(H)] + list(final_hidden(target, prompt)[:-1])
    tokens = torch.tensor([prompt])
    with torch.no_grad():
        logits, out = head(tokens, torch.arange(len(prompt))[None], torch.stack(features)[None], torch.tensor([2]))
        ref_logits, ref_out = eagle1_reference(w, target, tokens[0], features)
        torch.testing.assert_close(logits[0], ref_logits, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out[0], ref_out, rtol=1e-5, atol=1e-5)
        for _ in range(2):  # draft steps: fc over the token and the step before's output, every time
            tokens = torch.cat([tokens, logits[:, -1:].argmax(-1)], 1)
            features.append(out[0, -1])
            n = tokens.shape[1] - 1
            logits, out = head(tokens[:, -1:], torch.tensor([[n]]), out[:, -1:], torch.tensor([2]))
            ref_logits, _ = eagle1_reference(w, target, tokens[0], features)
            torch.testing.assert_close(logits[0, -1], ref_logits[-1], rtol=1e-5, atol=1e-5)
    dec = hf_spec_decoder(target, head, max_requests=3, max_seq_len=96, attention="gather", prefill_chunk=4)
    prompts = [[5, 17, 99, 3], [42, 7, 7, 8, 31, 9], [1, 2]]
    assert dec.generate(prompts, max_new_tokens=12, eos_token_id=None) == [
        hf_greedy(target, p, 12, eos_token_id=None) for p in prompts
    ]
