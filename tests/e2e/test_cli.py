"""The command line answers ordinary mistakes in one line with exit status 2, and the main job is
bisectable as it is."""

import json
import subprocess
import sys

import pytest
import torch

from stepgraph import __version__
from stepgraph.cli import main


def one_line_error(capsys, rc, *needles):
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1, err
    for n in needles:
        assert n in err, err
    return err


def exit_status(argv):
    try:
        return main(argv)
    except SystemExit as e:  # argparse's own errors
        return e.code


@pytest.mark.parametrize(
    "content,needle",
    [
        (None, "no such file"),
        (b"", "is empty"),
        (b'{"keys": {"bs=1/greedy": {', "not valid JSON"),
        (b"\x89PNG\r\n\x1a\n\x00\xff\xfe", "not text"),
        (b'{"hello": 1}', "not a stepgraph report"),
        (b"[1, 2, 3]", "not a stepgraph report"),
        (b'{"runners": [{"name": "x"}]}', "not a stepgraph report"),
    ],
    ids=["missing", "empty", "truncated", "binary", "other-json", "json-list", "runner-without-keys"],
)
def test_report_on_a_file_that_is_not_a_report(tmp_path, capsys, content, needle):
    path = tmp_path / "report.json"
    if content is not None:
        path.write_bytes(content)
    one_line_error(capsys, main(["report", str(path)]), needle, str(path))


def test_report_on_a_directory(tmp_path, capsys):
    one_line_error(capsys, main(["report", str(tmp_path)]), "is a directory")


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--batch", "0"], "--batch: must be >= 1, got 0"),
        (["--batch", "-1"], "--batch: must be >= 1"),
        (["--layers", "-1"], "--layers: must be >= 1"),
        (["--layers", "0"], "--layers: must be >= 1"),
        (["--vocab", "0"], "--vocab: must be >= 2"),
        (["--k", "two"], "'two' is not an integer"),
        (["--device", "bogus"], "is not a device"),
        (["--sampling", "nope"], "invalid choice"),
        (["--sampling", "temperature", "--temperature", "-1"], "temperature must be"),
        (["--no-repeat-ngram-size", "-1"], "--no-repeat-ngram-size: must be >= 0"),
    ],
)
def test_demo_flags_refused_in_one_line(capsys, flags, needle):
    one_line_error(capsys, exit_status(["demo", "--quiet", *flags]), needle)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without CUDA")
def test_demo_on_cuda_without_cuda(capsys):
    one_line_error(capsys, main(["demo", "--device", "cuda"]), "CUDA is not available")


def test_demo_json_that_cannot_be_written_fails_before_decoding(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    one_line_error(capsys, main(["demo", "--json", str(blocker / "out.json")]), "cannot be written")
    one_line_error(capsys, main(["demo", "--json", str(tmp_path)]), "is a directory")


def test_layers_and_vocab_overrides_are_applied(tmp_path, capsys):
    path = tmp_path / "demo.json"
    assert main(["demo", "--layers", "1", "--vocab", "300", "--max-new-tokens", "4", "--batch", "1",
                 "--json", str(path), "--quiet"]) == 0  # fmt: skip
    data = json.loads(path.read_text())
    assert data["args"]["layers"] == 1 and data["args"]["vocab"] == 300
    assert max(max(p) for p in data["prompts"]) < 300


@pytest.mark.parametrize("draft", ["eagle3", "mtp"])
def test_the_demo_runs_each_head(tmp_path, draft):
    path = tmp_path / "demo.json"
    assert main(["demo", "--draft", draft, "--layers", "4", "--max-new-tokens", "6", "--batch", "2",
                 "--json", str(path), "--quiet"]) == 0  # fmt: skip
    data = json.loads(path.read_text())
    assert data["args"]["draft"] == draft and all(len(o) == 6 for o in next(iter(data["outputs"].values())))


def test_the_demo_bans_repeated_ngrams(tmp_path):
    path = tmp_path / "demo.json"
    assert main(["demo", "--layers", "1", "--max-new-tokens", "24", "--batch", "2", "--no-repeat-ngram-size", "2",
                 "--json", str(path), "--quiet"]) == 0  # fmt: skip
    data = json.loads(path.read_text())
    (outputs,) = data["outputs"].values()  # on the CPU the eager decode only
    for prompt, out in zip(data["prompts"], outputs):
        seq = prompt + out
        grams = [tuple(seq[j : j + 2]) for j in range(len(seq) - 1)]
        assert len(grams) == len(set(grams)) and len(out) == 24


@pytest.mark.slow  # inductor compiling on the CPU: half a minute
def test_demo_compile_flag_compiles_the_forwards(tmp_path):
    path = tmp_path / "demo.json"
    assert main(["demo", "--compile", "--matmul", "triton", "--layers", "1", "--max-new-tokens", "4",
                 "--batch", "2", "--json", str(path), "--quiet"]) == 0  # fmt: skip
    data = json.loads(path.read_text())
    assert data["args"]["matmul"] == "triton"
    compiled = data["runners"][0]["compile"]
    assert compiled["target"]["compiles"] >= 1 and compiled["target"]["failures"] == 0
    assert compiled["target"]["backend"] == "inductor"


def test_version_and_program_names(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"stepgraph {__version__}"
    with pytest.raises(SystemExit):
        main(["--help"])
    assert capsys.readouterr().out.startswith("usage: stepgraph ")  # the console script's own name
    run = subprocess.run([sys.executable, "-m", "stepgraph", "demo", "--help"], capture_output=True, text=True)
    assert run.stdout.startswith("usage: python -m stepgraph demo")
    assert "``" not in run.stdout


def test_bisect_help_documents_its_flags(capsys):
    with pytest.raises(SystemExit):
        main(["bisect", "--help"])
    out = capsys.readouterr().out
    for flag in ("--file", "--timeout", "cmd"):
        assert flag in out


def test_bisect_of_a_missing_program(capsys):
    rc = main(["bisect", "--", "/no/such/program"])
    one_line_error(capsys, rc, "no such program")


def test_bisect_timeout_keeps_the_finished_runs(capsys):
    # slow only with fused_tail off: the runs before it finish, that one times out
    code = "import os, time; time.sleep(30 if os.environ.get('STEPGRAPH_FUSED_TAIL') == '0' else 0); print('x')"
    rc = main(["bisect", "--timeout", "3", "--", sys.executable, "-c", code])
    captured = capsys.readouterr()
    assert rc == 2
    assert "all pieces on" in captured.out and "fused_greedy_verify off" in captured.out
    assert "fused_tail off" not in captured.out
    assert captured.err.strip().count("\n") == 0 and "--timeout" in captured.err


@pytest.mark.slow  # a dozen runs of the demo: over a minute on two cores
def test_the_demo_is_bisectable_as_it_is():
    """The README's main job under bisect, sampled: its standard output does not depend on the toggles
    (seeded requests get the same tokens from the kernels and their torch references; greedy output is
    compared piece by piece in test_toggles_and_cli)."""
    demo = [sys.executable, "-m", "stepgraph", "demo", "--max-new-tokens", "12", "--sampling", "top_k"]
    cmd = [sys.executable, "-m", "stepgraph", "bisect", "--", *demo]
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}  # as a user runs it
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "every run gives the same output" in run.stdout
