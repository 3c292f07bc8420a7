"""MTP heads from a target's checkpoint (DeepSeek-V3's layout: the layer after the last): the loaded head
equals the MTP module computed over whole sequences, step by step, and decoding with it is exact."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from stepgraph.adapters.hf import hf_spec_decoder  # noqa: E402
from stepgraph.drafts import MTPDraft, load_mtp  # noqa: E402
from stepgraph.drafts.eagle import _rms  # noqa: E402
from tests.e2e.test_hf_cache_shapes import deepseek_v3  # noqa: E402
from tests.helpers import hf_greedy  # noqa: E402

H, V = 64, 256


@pytest.fixture(autouse=True)
def _torch_paths(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")


@pytest.fixture(scope="module")
def target():
    model = deepseek_v3(2, seed=0)
    model.generation_config.eos_token_id = None
    return model


def mtp_weights(target, seed=3):
    """A random MTP layer for ``target`` (layer 2, MoE as the target's layer 1), named as the checkpoint
    names it, without the model.layers.2. prefix."""
    torch.manual_seed(seed)
    cfg = transformers.DeepseekV3Config(
        **{**target.config.to_dict(), "num_hidden_layers": 1, "first_k_dense_replace": 0}
    )
    block = transformers.AutoModelForCausalLM.from_config(cfg).model.layers[0].state_dict()
    g = torch.Generator().manual_seed(seed)
    return {
        **block,
        "enorm.weight": 1 + 0.1 * torch.randn(H, generator=g),
        "hnorm.weight": 1 + 0.1 * torch.randn(H, generator=g),
        "eh_proj.weight": 0.2 * torch.randn(H, 2 * H, generator=g),
        "shared_head.norm.weight": 1 + 0.1 * torch.randn(H, generator=g),
        "shared_head.head.weight": 0.2 * torch.randn(V, H, generator=g),
    }


def write(path, weights, shards=False):
    path.mkdir(parents=True, exist_ok=True)
    named = {f"model.layers.2.{n}": t.contiguous() for n, t in weights.items()}
    named["model.layers.0.input_layernorm.weight"] = torch.ones(H)  # a target tensor, to be left alone
    if not shards:
        safetensors_torch.save_file(named, path / "model.safetensors")
        return path
    names = sorted(named)
    half = {n: ("a.safetensors" if i % 2 else "b.safetensors") for i, n in enumerate(names)}
    for f in ("a.safetensors", "b.safetensors"):
        safetensors_torch.save_file({n: named[n] for n in names if half[n] == f}, path / f)
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": half}))
    return path


def reference(head: MTPDraft, w, target, tokens, hidden):
    """The MTP module over positions 0..T-1 at once, no cache: its one-layer model over the combined
    input, the logits and the pre-norm outputs."""
    e = _rms(target.get_input_embeddings().weight[tokens].detach(), w["enorm.weight"], 1e-6)
    x = torch.cat([e, _rms(hidden, w["hnorm.weight"], 1e-6)], -1) @ w["eh_proj.weight"].T
    mini = head.mini
    out = mini.model.layers[0](
        x[None], position_embeddings=mini.model.rotary_emb(x[None], torch.arange(len(tokens))[None]),
        attention_mask=torch.full((len(tokens), len(tokens)), float("-inf")).triu(1)[None, None],
        position_ids=torch.arange(len(tokens))[None],
    )  # fmt: skip
    out = out[0] if isinstance(out, tuple) else out
    return mini.lm_head(mini.model.norm(out))[0], out[0]


@pytest.mark.parametrize("shards", [False, True], ids=["one file", "sharded"])
def test_the_loaded_mtp_head_is_the_module_step_by_step(target, tmp_path, shards):
    w = mtp_weights(target)
    head = load_mtp(write(tmp_path / "ckpt", w, shards), target, max_requests=2, max_seq_len=48)
    prompt = [5, 17, 99, 3, 42, 7]
    with torch.no_grad():
        final = target(torch.tensor([prompt]), output_hidden_states=True).hidden_states[-1][0]  # post-norm
        features = torch.cat([torch.zeros(1, H), final[:-1]])
        tokens = torch.tensor(prompt)
        logits, out = head(tokens[None], torch.arange(len(prompt))[None], features[None], torch.tensor([1]))
        ref_logits, ref_out = reference(head, w, target, tokens, features)
        torch.testing.assert_close(logits[0], ref_logits, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out[0], ref_out, rtol=1e-5, atol=1e-5)
        for _ in range(2):  # draft steps: the step before's token and output, from the head's cache
            tokens = torch.cat([tokens, logits[0, -1:].argmax(-1)])
            features = torch.cat([features, out[0, -1:]])
            n = len(tokens) - 1
            logits, out = head(tokens[None, -1:], torch.tensor([[n]]), out[:, -1:], torch.tensor([1]))
            ref_logits, ref_out = reference(head, w, target, tokens, features)
            torch.testing.assert_close(logits[0, -1], ref_logits[-1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("chunk", [None, 4], ids=["whole", "chunked"])
def test_decoding_with_the_mtp_head_is_exact(target, tmp_path, chunk):
    head = load_mtp(write(tmp_path / "ckpt", mtp_weights(target)), target, max_requests=2, max_seq_len=48)
    dec = hf_spec_decoder(target, head, max_requests=2, max_seq_len=48, num_draft_tokens=2, attention="gather",
                          prefill_chunk=chunk)  # fmt: skip
    prompts = [[5, 17, 99, 3, 42, 7], [9, 8]]
    assert dec.generate(prompts, max_new_tokens=8) == [hf_greedy(target, p, 8) for p in prompts]


def test_checkpoints_without_a_fitting_mtp_layer_are_refused(target, tmp_path):
    w = mtp_weights(target)
    (tmp_path / "none").mkdir()
    safetensors_torch.save_file(
        {"model.layers.0.input_layernorm.weight": torch.ones(H)}, tmp_path / "none" / "m.safetensors"
    )
    with pytest.raises(ValueError, match=r"no MTP layer \(no tensor under model.layers.2."):
        load_mtp(tmp_path / "none", target)
    missing = {n: t for n, t in w.items() if n != "eh_proj.weight"}
    with pytest.raises(ValueError, match=r"no tensor model.layers.2.eh_proj.weight \(expected shape \[64, 128\]\)"):
        load_mtp(write(tmp_path / "a", missing), target)
    with pytest.raises(ValueError, match="shared_head.head.weight has shape"):
        load_mtp(write(tmp_path / "b", w | {"shared_head.head.weight": torch.zeros(V + 1, H)}), target)
    block = {n: t for n, t in w.items() if not n.startswith("mlp.")}
    with pytest.raises(ValueError, match="does not match the target's layers: mlp."):
        load_mtp(write(tmp_path / "c", block), target)
