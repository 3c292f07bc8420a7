import logging

import pytest
import torch

from stepgraph import Buffer, RunnerConfig, Sampling, StaleOutputError, StepGraphRunner, Toggles
from stepgraph.errors import CaptureError, RecaptureRefused
from stepgraph.keys import GraphKey
from stepgraph.memory import MemoryGuard, MemoryReading, ReleaseBudget
from tests.helpers import ScriptedReader, SimulatedBackend, plenty

MiB = 1 << 20


def make(backend=None, guard=None, *, toggles=None, **cfg):
    calls = []

    def step(buf, bs, sampling):
        calls.append((bs, sampling))
        # a row-local computation: padded rows must never influence real ones
        out = buf["x"] * 2 + buf["y"][:, None].float()
        return {"out": out, "arg": buf["y"] + 1}

    bufs = {"x": Buffer((8, 3), torch.float32, pad=0.0), "y": Buffer((8,), torch.int64, pad=0)}
    cfg.setdefault("buckets", (1, 2, 4, 8))
    config = RunnerConfig(toggles=toggles or Toggles(), progress=False, **cfg)
    r = StepGraphRunner(step, bufs, device="cpu", config=config, backend=backend, guard=guard)
    return r, calls


def batch(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(n, 3, generator=g), "y": torch.randint(0, 100, (n,), generator=g)}


def expected(x):
    return x["x"] * 2 + x["y"][:, None].float()


def test_eager_without_cuda_pads_and_slices():
    r, calls = make()
    x = batch(3)
    out = r.run(x)
    assert torch.equal(out["out"], expected(x)) and out["out"].shape == (3, 3)
    assert calls == [(4, Sampling.GREEDY)]  # ran at the padded shape
    info = r.info()
    assert not info["graphs_available"] and "cpu" in info["graphs_unavailable_reason"]
    assert info["padded_rows"] == 1 and info["keys"]["bs=4/greedy"]["status"] == "eager"


def test_oversize_batch_runs_eagerly_at_its_own_size_and_is_counted():
    r, calls = make(buckets=(1, 2, 4))  # buffers hold 8, largest bucket 4
    x = batch(6)
    out = r.run(x, "temperature")
    assert torch.equal(out["out"], expected(x)) and calls[-1] == (6, Sampling.TEMPERATURE)
    assert r.info()["oversize_runs"] == 1


def test_empty_batch_and_missing_inputs_rejected():
    r, _ = make()
    with pytest.raises(ValueError, match="empty batch"):
        r.run({"x": torch.zeros(0, 3), "y": torch.zeros(0, dtype=torch.int64)})
    with pytest.raises(ValueError, match="empty batch"):
        r.run(None, batch_size=0)
    with pytest.raises(ValueError, match="needs inputs or batch_size"):
        r.run(None)


def test_padding_never_leaks_into_real_rows():
    r, _ = make()
    r.buffers.tensors["x"].fill_(float("nan"))  # poison every row
    x = batch(3)
    out = r.run(x)
    assert torch.isfinite(out["out"]).all() and torch.equal(out["out"], expected(x))


def test_stale_outputs_raise_and_copies_survive():
    r, _ = make()
    first = r.run(batch(2, 1))
    kept = r.run(batch(2, 2), copy_outputs=True)
    with pytest.raises(StaleOutputError, match="clone"):
        first["out"]
    r.run(batch(2, 3))
    assert kept["out"].shape == (2, 3)  # copies never go stale


def test_debug_mode_poisons_handed_out_tensors():
    r, _ = make(toggles=Toggles(debug=True))
    out = r.run(batch(2))
    held_float, held_int = out["out"], out["arg"]
    r.run(batch(2, 5))
    assert torch.isnan(held_float).all() and (held_int == -1).all()


def test_capture_on_first_use_then_replay():
    be = SimulatedBackend()
    r, calls = make(be)
    x = batch(3)
    out = r.run(x)
    assert torch.equal(out["out"], expected(x))
    st = r.stats(GraphKey(4, Sampling.GREEDY))
    assert st.status == "captured" and st.replays == 1 and st.eager_runs == 0
    y = batch(3, 9)
    assert torch.equal(r.run(y)["out"], expected(y))
    assert r.info()["captured_keys"] == ["bs=4/greedy"]


@pytest.mark.parametrize("path", ["first use", "capture", "warmup"])
def test_the_collector_is_off_during_every_capture_path(path):
    import gc

    class Recording(SimulatedBackend):
        def capture(self, fn, children=()):
            self.collector_on.append(gc.isenabled())
            return super().capture(fn, children)

    be = Recording()
    be.collector_on = []
    r, _ = make(be)
    if path == "first use":
        r.run(batch(3))
    elif path == "capture":
        r.capture([(4, "greedy"), (2, "greedy")])
    else:
        r.warmup(3)
    assert be.collector_on and not any(be.collector_on)
    assert gc.isenabled()  # and on again afterwards


def test_every_capture_in_the_package_runs_under_frozen_gc():
    """Each ``capture_begin`` and ``torch.cuda.graph`` in stepgraph lies inside a ``with frozen_gc()`` (an
    earlier item of the same ``with``, or an enclosing one): a collection inside any capture may destroy a
    dropped runner's graph and fail it (the staging ring's capture once did)."""
    import ast
    from pathlib import Path

    def is_call(node, name):
        return isinstance(node, ast.Call) and name in (getattr(node.func, "attr", None), getattr(node.func, "id", None))

    def captures(node):
        if is_call(node, "capture_begin"):
            return True
        func = node.func if isinstance(node, ast.Call) else None
        return isinstance(func, ast.Attribute) and func.attr == "graph" and ast.unparse(func.value) == "torch.cuda"

    found, bare = [], []

    def walk(node, frozen, where):
        if isinstance(node, ast.With):
            for item in node.items:
                if captures(item.context_expr):
                    found.append(where)
                    if not frozen:
                        bare.append(where)
                frozen = frozen or is_call(item.context_expr, "frozen_gc")
            for child in node.body:
                walk(child, frozen, where)
            return
        if captures(node):
            found.append(where)
            if not frozen:
                bare.append(where)
        for child in ast.iter_child_nodes(node):
            walk(child, frozen, f"{where}:{child.name}" if isinstance(child, ast.FunctionDef) else where)

    root = Path(__file__).resolve().parents[2] / "stepgraph"
    for path in sorted(root.rglob("*.py")):
        walk(ast.parse(path.read_text()), False, str(path.relative_to(root)))
    assert len(found) == 4, found  # a key's, the ring's, a spliced stage's, the trivial one
    assert not bare, f"captures outside frozen_gc(): {bare}"


def test_capture_runs_on_pad_filled_buffers_and_restores_them():
    seen = []
    be = SimulatedBackend()
    r, _ = make(be)
    r.buffers.tensors["y"][:4] = torch.tensor([5, 6, 7, 8])
    orig = r.step

    def spy(buf, bs, s):
        seen.append(buf["y"].clone())
        return orig(buf, bs, s)

    r.step = spy
    r.capture([(4, "greedy")])
    assert all((t == 0).all() for t in seen)  # warm-ups and capture saw only pad values
    assert r.buffers["y"][:4].tolist() == [5, 6, 7, 8]  # live content restored


def test_capture_largest_first():
    be = SimulatedBackend()
    r, _ = make(be)
    r.capture()
    assert be.order == [8, 4, 2, 1]


def test_memory_refusal_runs_eager_then_retries():
    reader = ScriptedReader(MemoryReading(free=10 * MiB, total=1 << 34, reserved=0, allocated=0))
    guard = MemoryGuard(reader, 0, budget=ReleaseBudget())
    be = SimulatedBackend(reader, peak=100 * MiB)
    r, _ = make(be, guard, refused_retry_runs=3)
    x = batch(2)
    for _ in range(3):
        assert torch.equal(r.run(x)["out"], expected(x))
    st = r.stats(GraphKey(2, Sampling.GREEDY))
    assert st.status == "refused" and st.eager_runs == 3 and st.refusals == 1
    reader.readings = [plenty()]  # memory freed
    r.run(x)  # 3 eager runs since the refusal: checked again, captured
    assert st.status == "captured" and st.replays == 1
    info = r.info()
    assert info["memory_refusals"] == 1 and info["last_memory_refusal"]["key"] == "bs=2/greedy"


def test_failed_capture_falls_back_logs_once_and_runner_stays_usable(caplog):
    be = SimulatedBackend(fail=RuntimeError("CUDA error: operation not permitted when stream is capturing"))
    r, _ = make(be)
    x = batch(3)
    with caplog.at_level(logging.WARNING, logger="stepgraph"):
        for _ in range(4):
            assert torch.equal(r.run(x)["out"], expected(x))
        r.capture([(4, "greedy")])  # explicit retry fails again
    st = r.stats(GraphKey(4, Sampling.GREEDY))
    assert st.status == "failed" and st.cause == "host_sync" and ".item()" in st.error
    assert st.failures == 2 and r.info()["capture_failures"] == 2 and st.eager_runs == 4
    assert len([rec for rec in caplog.records if "capture of key" in rec.getMessage()]) == 1


def test_on_capture_error_raise():
    be = SimulatedBackend(fail=RuntimeError("boom"))
    r, _ = make(be, on_capture_error="raise")
    with pytest.raises(CaptureError, match="boom"):
        r.capture([(2, "greedy")])


def test_recapture_refused_while_live_then_release_and_capture_again():
    be = SimulatedBackend()
    r, _ = make(be)
    r.capture([(2, "greedy")])
    with pytest.raises(RecaptureRefused, match="release"):
        r.request_recapture("weight update")
    r.release()
    assert be.releases == 1 and r.info()["captured_keys"] == []
    r.request_recapture("weight update")  # nothing live: fine
    r.run(batch(2))
    assert r.info()["captured_keys"] == ["bs=2/greedy"]


def test_warmup_covers_sizes_and_warns_for_missing(caplog):
    reader = ScriptedReader(plenty())
    be = SimulatedBackend(reader)
    r, _ = make(be, max_warmup_batch=8)
    rep = r.warmup(max_running_requests=5)
    assert rep.batch_sizes == [1, 2, 3, 4, 5] and rep.missing == []
    assert rep.captured_keys == ["bs=1/greedy", "bs=2/greedy", "bs=4/greedy", "bs=8/greedy"]
    be.fail = RuntimeError("boom")
    r.release()
    with caplog.at_level(logging.WARNING, logger="stepgraph"):
        rep = r.warmup(max_running_requests=2)
    assert rep.missing == [1, 2]
    assert any("still has no graph" in rec.getMessage() for rec in caplog.records)


def test_warmup_runs_one_batch_per_bucket_up_to_the_largest_by_default():
    be = SimulatedBackend(ScriptedReader(plenty()))
    r, calls = make(be)  # buckets 1, 2, 4, 8 and no warm-up cap
    rep = r.warmup()
    assert rep.batch_sizes == list(range(1, 9)) and rep.missing == []
    assert rep.captured_keys == ["bs=1/greedy", "bs=2/greedy", "bs=4/greedy", "bs=8/greedy"]
    assert r.info()["batch_size_histogram"] == {"1": 1, "2": 1, "4": 1, "8": 1}  # one batch per key
    r.run(batch(3))
    assert r.info()["runs"] == 5 and r.info()["replays"] == 5  # nothing captured while serving
    r, _ = make(SimulatedBackend(ScriptedReader(plenty())), max_warmup_batch=3)
    rep = r.warmup()
    assert rep.batch_sizes == [1, 2, 3] and rep.captured_keys == ["bs=1/greedy", "bs=2/greedy", "bs=4/greedy"]
    assert r.info()["batch_size_histogram"] == {"1": 1, "2": 1, "3": 1}
    with pytest.raises(TypeError, match="max_warmup_batch must be an int or None"):
        RunnerConfig(max_warmup_batch=2.5)


def test_agree_hook_can_refuse_everywhere():
    be = SimulatedBackend()
    r, _ = make(be)
    r.agree = lambda vote: min(vote, 1)  # another rank refused for memory
    r.run(batch(1))
    assert r.stats(GraphKey(1, Sampling.GREEDY)).status == "refused"


def test_a_capture_that_failed_on_another_rank_is_discarded_here():
    be = SimulatedBackend()
    r, _ = make(be)
    votes = []
    r.agree = lambda vote: votes.append(vote) or (0 if len(votes) == 2 else vote)  # peer fails its capture
    out = r.run(batch(1))
    s = r.stats(GraphKey(1, Sampling.GREEDY))
    assert votes == [2, 2] and be.discarded == 1
    assert (s.status, s.cause, s.replays, s.eager_runs) == ("failed", "peer_failed", 0, 1)
    assert torch.equal(out["out"], expected(batch(1)))


def test_a_warmup_failure_still_votes_so_no_rank_waits():
    be = SimulatedBackend()
    r, _ = make(be)
    votes = []
    r.agree = lambda vote: votes.append(vote) or vote
    calls = {"n": 0}
    step = r.step

    def flaky(buf, bs, sampling):
        calls["n"] += 1
        if calls["n"] == 1:  # the first warm-up run raises on this rank
            raise RuntimeError("boom")
        return step(buf, bs, sampling)

    r.step = flaky
    r.run(batch(1))
    assert votes == [0] and r.stats(GraphKey(1, Sampling.GREEDY)).cause == "step_error"


def test_step_output_contract():
    r, _ = make()
    r.step = lambda buf, bs, s: {"bad": torch.zeros(3)}
    with pytest.raises(ValueError, match="batch .* first"):
        r.run(batch(2))


def test_info_fields_and_bucket_suggestion():
    r, _ = make()
    for n in [3, 3, 3, 5, 5, 1]:
        r.run(batch(n))
    info = r.info()
    for field in (
        "memory_refusals",
        "last_memory_refusal",
        "cache_releases",
        "captured_keys",
        "max_batch_size",
        "num_alloc_retries",
        "num_ooms",
        "keys",
    ):
        assert field in info
    assert info["max_batch_size"] == 8
    assert info["batch_size_histogram"] == {"1": 1, "3": 3, "5": 2}
    assert info["pad_waste"]["suggested"] <= info["pad_waste"]["current"]
    assert info["suggested_buckets"][-1] == 5


def test_the_report_says_why_graphs_are_off(monkeypatch):
    r, _ = make()  # a CPU: the device is the reason, whatever the switch says
    assert "buffers are on cpu" in r.info()["graphs_unavailable_reason"]
    r, _ = make(SimulatedBackend(), toggles=Toggles(step_graph=False))
    assert "the runner's config (Toggles(step_graph=False))" in r.info()["graphs_unavailable_reason"]
    monkeypatch.setenv("STEPGRAPH_ENABLE", "0")
    r, _ = make(SimulatedBackend(), toggles=Toggles.from_env())
    assert "STEPGRAPH_ENABLE=0 in the environment" in r.info()["graphs_unavailable_reason"]
