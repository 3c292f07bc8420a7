"""Toggles change nothing in greedy output; bisect finds the piece that does; the CLI's main commands."""

import json
import subprocess
import sys

import pytest
import torch

from stepgraph import RunnerConfig, Toggles
from stepgraph.cli import main
from stepgraph.examples.model import build
from stepgraph.speculative.decoder import SpecDecoder

PROMPTS = [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8, 9, 7, 9]]


def combos():
    names = Toggles.piece_names()
    yield Toggles.all(True)
    yield Toggles.all(False)
    for n in names:
        yield Toggles.all(True).with_piece(n, False)  # each piece off in turn
        yield Toggles.all(False).with_piece(n, True)  # each piece alone


def decode(toggles):
    target, draft = build("tiny")
    dec = SpecDecoder.for_example(target, draft, max_batch=2, config=RunnerConfig(toggles=toggles), prefill_chunk=4)
    return dec.generate(PROMPTS, max_new_tokens=[6, 9, 4])  # joins, leaves and a K = 3 chain past its end


@pytest.mark.slow  # a decode for every combination of pieces: over half a minute on two cores
def test_every_piece_combination_gives_identical_greedy_output():
    outs = {str(t.pieces()): decode(t) for t in combos()}
    assert len(outs) == 2 + 2 * len(Toggles.piece_names())
    assert len({json.dumps(v) for v in outs.values()}) == 1


def test_toggles_reach_the_step_through_the_environment(monkeypatch):
    monkeypatch.setenv("STEPGRAPH_ENABLE", "1")
    monkeypatch.setenv("STEPGRAPH_FUSED_TAIL", "0")
    cfg = RunnerConfig()
    assert cfg.toggles.step_graph and not cfg.toggles.fused_tail and cfg.toggles.fused_relay
    target, draft = build("tiny")
    dec = SpecDecoder.for_example(target, draft, config=cfg)
    assert dec.step.pieces.toggles.fused_tail is False and dec.step.relay.single_views is True


def _bisect(code, tmp_path, capsys):
    rc = main(["bisect", "--", sys.executable, "-c", code])
    return rc, capsys.readouterr().out


#: a command that reads one piece as stepgraph resolves it (its variable, else the master switch), without
#: importing torch: ten runs of it cost ten Python starts
READS_FUSED_TAIL = (
    "import os; e = os.environ; v = e.get('STEPGRAPH_FUSED_TAIL') or e.get('STEPGRAPH_ENABLE', '1'); "
    "print('fused' if v == '1' else 'torch')"
)


def test_bisect_names_the_piece_that_changes_the_output(tmp_path, capsys):
    code = READS_FUSED_TAIL
    rc, out = _bisect(code, tmp_path, capsys)
    assert rc == 1
    assert "pieces that change the output: fused_tail, all off (plain path)" in out


def test_bisect_reports_no_change(tmp_path, capsys):
    rc, out = _bisect("print('same')", tmp_path, capsys)
    assert rc == 0 and "every run gives the same output" in out


def test_bisect_compares_a_file(tmp_path, capsys):
    f = tmp_path / "out.txt"
    code = READS_FUSED_TAIL.replace("print(", f"open({str(f)!r}, 'w').write(")
    rc = main(["bisect", "--file", str(f), "--", sys.executable, "-c", code])
    assert rc == 1 and "fused_tail" in capsys.readouterr().out


def test_demo_json_report_and_kernels(tmp_path):
    path = tmp_path / "demo.json"
    cmd = [
        sys.executable,
        "-m",
        "stepgraph",
        "demo",
        "--batch",
        "2",
        "--max-new-tokens",
        "8",
        "--json",
        str(path),
        "--quiet",
    ]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "mean accepted length" in run.stdout
    if not torch.cuda.is_available():
        assert "running the same loop eagerly" in run.stderr
    data = json.loads(path.read_text())
    tokens = next(iter(data["outputs"].values()))
    assert len(tokens) == 2 and all(len(t) == 8 for t in tokens)
    assert data["runners"][0]["keys"]
    rep = subprocess.run([sys.executable, "-m", "stepgraph", "report", str(path)], capture_output=True, text=True)
    assert rep.returncode == 0 and "keys" in rep.stdout
    kern = subprocess.run([sys.executable, "-m", "stepgraph", "kernels"], capture_output=True, text=True)
    assert kern.returncode == 0 and "greedy_chain_verify" in kern.stdout


@pytest.mark.parametrize("argv", [["demo", "--sampling", "nope"], ["report"]])
def test_cli_rejects_bad_arguments(argv):
    with pytest.raises(SystemExit):
        main(argv)


def test_quickstart_example_runs():
    from stepgraph.examples.quickstart import main as quickstart

    info = quickstart()
    assert info["runs"] == 4 + info["warmup"]["batch_sizes"][-1]
    assert info["batch_size_histogram"]["5"] == 5  # the warm-up batch of 5 and four runs


def test_demo_refuses_a_flag_it_cannot_honour_with_a_clear_error(capsys, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("the refusal is for a CPU without Triton's interpreter")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    rc = main(["demo", "--attention", "triton", "--quiet"])
    assert rc == 2 and "TRITON_INTERPRET=1" in capsys.readouterr().err
