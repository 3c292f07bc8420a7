"""The documentation: the guides' Python blocks run as written, and the site (with its API reference from
the docstrings) builds with warnings as errors."""

import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "your-own-model.md"
BLOCKS = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S)
DRAFT_GUIDE = ROOT / "docs" / "draft-length.md"


def plain_greedy(target, prompt, n):
    """The target's own greedy decoding, one token per forward, in cache row 0."""
    device = target.embed.device
    tokens = torch.tensor([prompt], device=device)
    logits, _ = target(tokens, torch.arange(len(prompt), device=device)[None], torch.zeros(1, dtype=torch.long))
    out = [int(logits[0, -1].argmax())]
    for i in range(n - 1):
        pos = torch.tensor([[len(prompt) + i]], device=device)
        logits, _ = target(torch.tensor([[out[-1]]], device=device), pos, torch.zeros(1, dtype=torch.long))
        out.append(int(logits[0, -1].argmax()))
    return out


def test_the_guide_has_both_blocks():
    assert len(BLOCKS) == 2


def test_plain_pytorch_model_block_runs_and_decodes_the_targets_greedy_tokens(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    namespace: dict = {"__name__": "guide_block_0"}
    exec(compile(BLOCKS[0], "docs/your-own-model.md python block 0", "exec"), namespace)  # noqa: S102
    fresh = namespace["Target"](seed=0)
    assert namespace["tokens"] == [plain_greedy(fresh, p, 12) for p in ([17, 4, 99, 5], [42, 7])]
    assert namespace["decoder"].stats.mean_accept_len == 4.0  # the twin draft: every token accepted


def test_hugging_face_block_runs_and_equals_generate(monkeypatch):
    transformers = pytest.importorskip("transformers")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    namespace: dict = {"__name__": "guide_block_1"}
    exec(compile(BLOCKS[1], "docs/your-own-model.md python block 1", "exec"), namespace)  # noqa: S102
    target, ids, outputs = namespace["target"], namespace["ids"], namespace["outputs"]
    for prompt, new in zip(ids, outputs):
        ref = target.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False, eos_token_id=None)
        assert new == ref[0, len(prompt) :].tolist()[: len(new)]
    tokenizer = namespace["tokenizer"]
    assert isinstance(tokenizer, transformers.PreTrainedTokenizerBase)
    assert namespace["texts"] == [tokenizer.decode(new, skip_special_tokens=True) for new in outputs]
    assert len(namespace["sampled"]) == 2 and all(isinstance(t, str) for t in namespace["sampled"])


def test_draft_length_block_runs_a_policy_of_ones_own_and_simulates_it(monkeypatch, capsys):
    from stepgraph.examples.model import greedy_reference

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    (block,) = re.findall(r"```python\n(.*?)```", DRAFT_GUIDE.read_text(), flags=re.S)
    namespace: dict = {"__name__": "draft_length_block"}
    exec(compile(block, "docs/draft-length.md python block", "exec"), namespace)  # noqa: S102
    target = namespace["target"]
    assert namespace["outputs"] == [greedy_reference(target, p, 16) for p in ([5, 17, 99, 3], [42, 7])]
    taken = namespace["decoder"].stats.draft_len_steps
    assert set(taken) <= {0, 1, 3} and taken[3] > 0  # two requests: K = 3 while the drafts are accepted
    printed = capsys.readouterr().out
    assert "short when crowded:" in printed and "auto:" in printed


def test_sampling_block_serves_an_openai_request_as_the_reference_decodes_it(monkeypatch, capsys):
    from tests.e2e.test_penalties import reference_greedy

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    (block,) = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "sampling.md").read_text(), flags=re.S)
    namespace: dict = {"__name__": "sampling_block"}
    exec(compile(block, "docs/sampling.md python block", "exec"), namespace)  # noqa: S102
    request, params = namespace["request"], namespace["params"]
    assert dict(params.logit_bias) == {7: 2.0, 42: -100.0}
    assert request.output == reference_greedy(namespace["target"], [5, 17, 99, 3], 12, params)
    assert 42 not in request.output and len(request.logprobs) == len(request.top_logprobs) == len(request.output)
    assert all(len(alternatives) == 2 for alternatives in request.top_logprobs)
    assert str(request.output) in capsys.readouterr().out


def test_serving_block_streams_three_clients_and_aborts_one(monkeypatch, capsys):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    (block,) = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "serving.md").read_text(), flags=re.S)
    namespace: dict = {"__name__": "serving_block"}
    exec(compile(block, "docs/serving.md python block", "exec"), namespace)  # noqa: S102
    results, decoder = namespace["results"], namespace["decoder"]
    from stepgraph import SamplingParams

    for i, (tokens, reason) in sorted(results.items()):
        prompt = [5, 17, 99, 3 + i]
        alone = decoder.generate([prompt], max_new_tokens=16, sampling=SamplingParams(temperature=0.8, seed=4))[0]
        if i == 1:  # the client that gave up after four tokens
            assert reason == "abort" and 4 <= len(tokens) < 16 and tokens == alone[: len(tokens)]
        else:
            assert reason == "length" and tokens == alone
    assert decoder.slots.free() == decoder.max_requests  # every slot back
    assert not namespace["server"].is_alive() and "1 abort" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("mkdocs") is None and not (pathlib.Path(sys.executable).parent / "mkdocs").exists(),
                    reason="the docs extra is not installed (pip install -e '.[docs]')")  # fmt: skip
def test_the_site_builds_with_warnings_as_errors(tmp_path):
    mkdocs = pathlib.Path(sys.executable).parent / "mkdocs"
    # not -q: it would hide the warnings that --strict counts (griffe's, on docstrings)
    cmd = [str(mkdocs) if mkdocs.exists() else "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "WARNING" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    assert (tmp_path / "site" / "api" / "runner" / "index.html").exists()
