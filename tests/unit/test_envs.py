import pathlib
import re

import pytest
import torch

from stepgraph import envs
from stepgraph.config import RunnerConfig, Toggles


def test_defaults_follow_master():
    t = Toggles.from_env({})
    assert t.step_graph and all(t.pieces().values())
    off = Toggles.from_env({"STEPGRAPH_ENABLE": "0"})
    assert not off.step_graph and not any(off.pieces().values())


def test_piece_overrides_three_states():
    t = Toggles.from_env({"STEPGRAPH_ENABLE": "1", "STEPGRAPH_FUSED_TAIL": "0"})
    assert t.step_graph and not t.fused_tail and t.fused_relay
    t = Toggles.from_env({"STEPGRAPH_ENABLE": "0", "STEPGRAPH_FUSED_GREEDY_VERIFY": "1"})
    assert not t.step_graph and t.fused_greedy_verify and not t.fused_tail
    t = Toggles.from_env({"STEPGRAPH_FUSED_RELAY": ""})  # empty = unset
    assert t.fused_relay


@pytest.mark.parametrize("value", ["yes", "true", "2", "on"])
def test_bad_value_names_valid_choices(value):
    with pytest.raises(envs.EnvError, match="use 0 .*or 1"):
        Toggles.from_env({"STEPGRAPH_FUSED_TAIL": value})


def test_unknown_name_lists_valid_ones():
    with pytest.raises(envs.EnvError, match="STEPGRAPH_FUSED_TAIL") as e:
        Toggles.from_env({"STEPGRAPH_FUSED_TIAL": "1"})
    assert "STEPGRAPH_FUSED_TIAL" in str(e.value)


def test_each_switch_is_declared_once_with_its_variable():
    assert len(Toggles.piece_names()) == 12
    variables = Toggles.variables()
    assert len(variables) == 14 and all(v.startswith("STEPGRAPH_") for v in variables)  # master, 12 pieces, debug
    for name in Toggles.piece_names():
        on = Toggles.from_env({Toggles.variable(name): "0"})
        assert not getattr(on, name) and all(v for n, v in on.pieces().items() if n != name)


def test_runner_config_reads_env(monkeypatch):
    monkeypatch.setenv("STEPGRAPH_ONE_LAUNCH_COPY", "0")
    assert RunnerConfig().toggles.one_launch_copy is False
    monkeypatch.setenv("STEPGRAPH_ONE_LAUNCH_COPY", "maybe")
    with pytest.raises(envs.EnvError):
        RunnerConfig()


@pytest.mark.parametrize(
    "kwargs", [{"buckets": ()}, {"memory_margin_bytes": -1}, {"warmup_iters": 0}, {"on_capture_error": "ignore"}]
)
def test_runner_config_validation(kwargs):
    with pytest.raises(ValueError):
        RunnerConfig(toggles=Toggles(), **kwargs)


def test_environment_read_only_in_envs_module():
    root = pathlib.Path(__file__).resolve().parents[2]
    pattern = re.compile(r"os\.environ|os\.getenv|getenv\(")
    offenders = []
    for path in root.joinpath("stepgraph").rglob("*.py"):
        if path.name == "envs.py":
            continue
        if pattern.search(path.read_text()):
            offenders.append(str(path.relative_to(root)))
    assert offenders == [], f"environment read outside stepgraph/envs.py: {offenders}"


def test_readme_documents_every_variable():
    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    for name, doc in Toggles.variables().items():
        row = f"| `{name}` | {doc} |"  # the table says what the code says
        assert row in readme, f"README's row for {name} differs from stepgraph/config.py; it should read: {row}"


@pytest.mark.parametrize(
    "value,on",
    [
        ("1", True),
        ("true", True),
        ("ON", True),
        ("yes", True),
        ("0", False),
        ("false", False),
        ("abc", False),
        ("", False),
    ],
)
def test_the_kernels_read_triton_interpret_as_triton_reads_it(value, on, monkeypatch):
    from stepgraph.kernels import triton_interprets

    monkeypatch.setenv("TRITON_INTERPRET", value)
    assert triton_interprets() is on  # asks Triton itself


def test_kernels_fall_back_to_torch_when_the_interpreter_is_off(monkeypatch):
    from stepgraph.kernels.greedy_verify import greedy_chain_verify

    monkeypatch.setenv("TRITON_INTERPRET", "false")  # used to mean "on" here and "off" in Triton: 0 drivers
    x = torch.randn(2, 3, 50)
    assert torch.equal(greedy_chain_verify(x, torch.zeros(2, 2, dtype=torch.long)).predict, torch.argmax(x, -1))
