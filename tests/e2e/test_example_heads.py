"""The example model's trained-style heads. EAGLE-3: the target tapped natively at three layers, the
head's draft vocabulary mapped to the target's. MTP: DeepSeek's formula over the target's final state. Both
give greedy output equal to the target's own on every path."""

import pytest
import torch

from stepgraph.examples.model import (
    Eagle3Head,
    ExampleTarget,
    ModelConfig,
    MtpHead,
    _rms_norm,
    build,
    eagle3_taps,
    greedy_reference,
)
from stepgraph.speculative.decoder import SpecDecoder


@pytest.fixture(autouse=True)
def _torch_pieces(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")


@pytest.mark.parametrize("kv,chunk", [("rows", None), ("paged", 5)])
@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
def test_greedy_output_with_the_eagle3_head_is_the_targets(kv, chunk, overlap):
    target, head = build("tiny", draft="eagle3", kv=kv, page_size=4, num_layers=6)
    assert target.taps == (2, 3, 3) and target.hidden_size == 3 * 64 and head.hidden_size == 64
    dec = SpecDecoder.for_example(target, head, num_draft_tokens=3, max_batch=4, prefill_chunk=chunk)
    prompts = [[5, 6, 7, 8, 9] * 3, [1, 2, 3], [4]]
    out = dec.generate(prompts, max_new_tokens=20, overlap=overlap)
    assert out == [greedy_reference(target, p, 20) for p in prompts]


def test_taps_are_the_stream_entering_each_layer_and_proposals_stay_in_the_draft_vocabulary():
    cfg = ModelConfig(num_layers=4)
    plain, tapped = ExampleTarget(cfg), ExampleTarget(cfg, taps=(0, 2, 3))
    tokens, positions, rows = torch.tensor([[3, 9, 27]]), torch.arange(3)[None], torch.tensor([0])
    logits, final = plain(tokens, positions, rows)
    tapped_logits, hidden = tapped(tokens, positions, rows)
    assert torch.equal(tapped_logits, logits) and hidden.shape == (1, 3, 3 * 64)
    assert torch.equal(hidden[..., :64], plain.embed[tokens])  # entering layer 0: the embedding
    head = Eagle3Head(tapped)
    d_logits, feature = head(tokens, positions, hidden, rows)
    kept = torch.isfinite(d_logits[0, 0])
    assert kept.sum() == 128 and torch.equal(kept.nonzero()[:, 0], head.targets) and feature.shape == (1, 3, 64)
    assert set(d_logits.argmax(-1).flatten().tolist()) <= set(head.targets.tolist())
    with pytest.raises(ValueError, match="taps"):
        ExampleTarget(cfg, taps=(0, 4))
    with pytest.raises(ValueError, match="three target layers"):
        Eagle3Head(plain)
    assert eagle3_taps(28) == (2, 14, 25) and eagle3_taps(2) == (1, 1, 0)


@pytest.mark.parametrize("kv,chunk", [("rows", None), ("paged", 5)])
@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlapped"])
def test_greedy_output_with_the_mtp_head_is_the_targets(kv, chunk, overlap):
    target, head = build("tiny", draft="mtp", kv=kv, page_size=4)
    assert isinstance(head, MtpHead) and head.hidden_size == target.hidden_size
    dec = SpecDecoder.for_example(target, head, num_draft_tokens=2, max_batch=4, prefill_chunk=chunk)
    prompts = [[5, 6, 7, 8, 9] * 3, [1, 2, 3], [4]]
    assert dec.generate(prompts, max_new_tokens=16, overlap=overlap) == [
        greedy_reference(target, p, 16) for p in prompts
    ]


def test_the_mtp_head_is_deepseeks_formula():
    """eh_proj(cat(enorm(embed(x)), hnorm(h))), one layer, then its own norm and the target's head: against
    the same arithmetic written out, with the layer taken from the head."""
    target, head = build("tiny", draft="mtp")
    tokens, positions, rows = torch.tensor([[3, 9, 27]]), torch.arange(3)[None], torch.tensor([0])
    _, final = target(tokens, positions, rows)
    logits, out = head(tokens, positions, final, rows)
    x = torch.cat([_rms_norm(target.embed[tokens], head.enorm), _rms_norm(final, head.hnorm)], -1) @ head.fc
    layer_out, _ = head.stack(x, positions, rows)
    torch.testing.assert_close(out, layer_out, rtol=0, atol=0)
    torch.testing.assert_close(logits, _rms_norm(layer_out, head.norm) @ target.lm_head, rtol=0, atol=0)
