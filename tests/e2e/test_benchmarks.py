"""Every benchmark script runs, each of its modes at a tiny shape (``--smoke``; eager where there is no GPU),
so that none rots between runs on the GPU machine."""

import os
import pathlib
import subprocess
import sys

import pytest

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))
#: scripts whose kernels run in Triton's interpreter on a CPU (the others use the torch references there)
INTERPRETED = {"bench_kernels.py"}
#: each script's run, and the modes of its own that a plain run leaves out
RUNS = [(name, ()) for name in SCRIPTS] + [("bench_logprobs.py", ("--prompt",))]
#: the longest smoke runs (15-30 s each on two cores), left to the slow run to keep the suite's time
SLOW = {"bench_sampling.py", "bench_tp.py", "bench_paged.py", "bench_hf.py", "bench_penalties.py"}


def test_every_script_is_smoke_run():
    assert {"bench_kernels.py", "bench_step.py", "bench_serving.py"} <= set(SCRIPTS)
    assert set(SCRIPTS) >= SLOW
    for name in SCRIPTS:
        assert "add_smoke_flag" in (BENCHMARKS / name).read_text(), f"{name} has no --smoke"


@pytest.mark.parametrize(
    "script,mode",
    [pytest.param(name, mode, marks=[pytest.mark.slow] if name in SLOW and not mode else []) for name, mode in RUNS],
    ids=[" ".join((name, *mode)) for name, mode in RUNS],
)
def test_benchmark_smoke_run(script, mode, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STEPGRAPH_", "TRITON_INTERPRET"))}
    if script in INTERPRETED:
        env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run(
        [sys.executable, script, *mode, "--smoke", "--out", str(tmp_path)],
        cwd=BENCHMARKS,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list(tmp_path.glob("*.json")) and list(tmp_path.glob("*.md")), "no result files written"


def test_the_draft_length_policies_simulate_on_a_saved_runs_step_times():
    saved = BENCHMARKS / "results" / "2026-12-01-h200-run27" / "adaptive" / "adaptive.json"
    tables = {}
    for host_ms, requests in (("0", "8"), ("50", "8"), ("0", "1")):
        # 50 ms of host time a step: every K costs about the same, the longest pays
        proc = subprocess.run(
            [sys.executable, "bench_adaptive.py", "--simulate", str(saved), "--tokens", "12", "--host-ms", host_ms,
             "--requests", requests],
            cwd=BENCHMARKS,
            capture_output=True,
            text=True,
            timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"at least {requests} requests a point" in proc.stdout
        assert f"{float(host_ms)} ms of host time per step" in proc.stdout
        rows = [line for line in proc.stdout.splitlines() if line.startswith("| 0.")]
        assert [r.split(" | ")[0] for r in rows] == ["| 0.3", "| 0.6", "| 0.9"]
        cells = [c.replace("(", "").replace(")", "").split() for r in rows for c in r.strip("| ").split(" | ")[1:]]
        tables[host_ms, requests] = [(float(median), float(lowest)) for median, lowest in cells]
    assert all(0.5 < lowest <= median < 1.5 for median, lowest in tables["0", "8"])
    assert tables["50", "8"] != tables["0", "8"]
    # a point of B >= 8 decodes one batch either way; at B = 1 eight requests in turn are not one request
    one, eight = ([row[i::6] for i in range(6)] for row in (tables["0", "1"], tables["0", "8"]))
    assert one[2:] == eight[2:] and one[0] != eight[0]


def test_bench_hf_upper_scale_makes_the_two_layer_draft_agree(monkeypatch):
    """``bench_hf.py --upper-scale``: the smaller the target's upper layers, the more often its first two
    layers (the cheap draft) pick the target's own next token."""
    pytest.importorskip("transformers")
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_hf
    import torch

    shape = {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 8}
    monkeypatch.setattr(bench_hf, "SHAPE", {**bench_hf.SHAPE, **shape, "num_attention_heads": 4})
    ids = torch.randint(0, 512, (1, 64), generator=torch.Generator().manual_seed(0))

    def agreement(scale):
        target = bench_hf.target_model().float()
        bench_hf.scale_upper_layers(target, scale)
        draft = bench_hf.cheap_draft(target)
        with torch.no_grad():
            return (target(ids).logits.argmax(-1) == draft(ids).logits.argmax(-1)).float().mean().item()

    full, quiet = agreement(1.0), agreement(0.02)
    assert quiet > 0.9 and quiet > full + 0.3, (full, quiet)
