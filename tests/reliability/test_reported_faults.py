"""Each fault an adversarial pass found, pinned: values refused when given (naming the argument), nothing
left half-done at capacity, wide elements, threads, and the command line on bad files and arguments."""

import json
import os
import sys
import threading

import numpy as np
import pytest
import torch

from stepgraph import Buffer, RunnerConfig, SamplingParams, SpecDecoder, StaticBuffers, Toggles
from stepgraph.cli import main
from stepgraph.examples.model import build
from stepgraph.report_file import MAX_DEPTH, MAX_REPORT_BYTES, load_report, save_report
from tests.unit.test_runner import batch, make


def decoder(**kw):
    target, draft = build("tiny")
    return SpecDecoder.for_example(target, draft, **kw)


# ---- broken state ---------------------------------------------------------------------------------------
def test_admit_beyond_capacity_is_refused_before_anything_is_taken():
    dec = decoder(max_batch=2)
    requests = dec.make_requests([[1, 2, 3]] * (dec.max_requests + 1), max_new_tokens=4)
    with pytest.raises(ValueError, match="only 8 of the decoder's 8 slots are free"):
        dec.admit(requests)
    assert dec.in_use == (0, 0)
    dec.admit(requests[:2])
    with pytest.raises(ValueError, match="only 6 of"):
        dec.admit(requests[2:])
    dec.finish(requests[:2])
    assert dec.in_use == (0, 0)
    assert [len(o) for o in dec.generate([[1, 2, 3]], max_new_tokens=4)] == [4]


@pytest.mark.parametrize("staged", [True, False])
def test_a_complex128_buffer_with_a_fill_pad_takes_the_fallback(staged):
    decl = {"z": Buffer((4, 2), torch.complex128, pad=1.5), "x": Buffer((4,), torch.int64, pad=7)}
    b = StaticBuffers(decl, "cpu", one_launch_copy=True, staged_copy=staged)
    b.copy_in({"x": torch.arange(3)}, 3, 4)  # the only input is another buffer
    z = torch.full((2, 2), 2j, dtype=torch.complex128)
    b.copy_in({"z": z, "x": torch.arange(2)}, 2, 4)
    assert torch.equal(b["z"][:2], z) and (b["z"][2:] == 1.5).all()
    assert b["x"].tolist() == [0, 1, 7, 7]


# ---- values refused when given ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call,error,match",
    [
        (lambda: SamplingParams(temperature=1.0, top_k=10**30), ValueError, "top_k=.* does not fit int64"),
        (lambda: decoder().generate([[1, 2]], arrivals=[float("inf")]), ValueError, "arrivals: give one finite"),
        (lambda: decoder().generate([[1, 2]], arrivals=[float("nan")]), ValueError, "arrivals"),
        (lambda: decoder(num_draft_tokens=2.5), TypeError, "num_draft_tokens must be an int"),
        (lambda: decoder(max_batch=1.5), ValueError, "max_batch must be in 1..max_requests"),
        (lambda: decoder().generate([[1, 2]], sampling=None), TypeError, "sampling must be a SamplingParams"),
        (lambda: decoder().generate([[1, 2]], max_new_tokens=None), TypeError, "max_new_tokens must be an int"),
        (lambda: decoder().warmup(0), ValueError, "max_running_requests must be an int >= 1"),
        (lambda: RunnerConfig(warmup_iters=1.5), TypeError, "RunnerConfig.warmup_iters must be an int"),
        (lambda: make()[0].run(batch(2), batch_size=2.5), TypeError, "batch_size must be an int"),
        (lambda: make()[0].run([torch.zeros(2, 3)]), TypeError, "inputs must be a mapping"),
        (lambda: make()[0].warmup(0), ValueError, "max_running_requests must be an int >= 1"),
    ],
    ids=[
        "top_k-huge", "arrival-inf", "arrival-nan", "k-float", "max_batch-float", "sampling-None",
        "max_new_tokens-None", "decoder-warmup-0", "warmup_iters-float", "batch_size-float", "inputs-list",
        "runner-warmup-0",
    ],
)  # fmt: skip
def test_values_that_would_fail_later_are_refused_when_given(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_numpy_ints_and_sampling_names_are_taken():
    dec = decoder()
    assert [len(o) for o in dec.generate([[1, 2]], max_new_tokens=np.int64(4))] == [4]
    assert RunnerConfig(toggles=Toggles(), default_sampling="temperature").default_sampling.name == "TEMPERATURE"
    r, _ = make()
    assert r.run(batch(2), batch_size=np.int64(2))["out"].shape == (2, 3)


def test_hf_adapter_refuses_a_masked_lm_and_a_bad_eos_list():
    transformers = pytest.importorskip("transformers")
    from stepgraph.adapters.hf import hf_spec_decoder

    bert = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=32)  # fmt: skip
    masked = transformers.BertForMaskedLM(bert).eval()
    with pytest.raises(ValueError, match="not a causal language model"):
        hf_spec_decoder(masked, masked)
    llama = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=1)  # fmt: skip
    lm = transformers.LlamaForCausalLM(llama).eval()
    lm.generation_config.eos_token_id = [1, None]
    with pytest.raises(ValueError, match="eos_token_id is \\[1, None\\]: every id must be an int"):
        hf_spec_decoder(lm, lm)


# ---- threads ----------------------------------------------------------------------------------------------
def test_threads_sharing_a_decoder_each_get_the_tokens_they_would_get_alone():
    dec = decoder(max_batch=3)
    work = [[[i + 1, 2 * i + 3, 5]] * (1 + i % 3) for i in range(8)]
    alone = [dec.generate(prompts, max_new_tokens=6) for prompts in work]
    got: dict[int, list] = {}
    errors: list = []

    def client(i):
        try:
            got[i] = dec.generate(work[i], max_new_tokens=6)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(work))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and [got[i] for i in range(len(work))] == alone
    assert dec.in_use == (0, 0)


# ---- a bisect toggle never changes what is read ------------------------------------------------------------
def test_with_the_copy_kernel_off_a_host_input_is_read_before_run_returns():
    r, _ = make(toggles=Toggles().with_piece("one_launch_copy", False))
    x = batch(3)
    out = r.run(x, copy_outputs=True)
    expected = out["out"].clone()
    x["x"].add_(100.0)  # the caller reuses its tensor at once
    assert torch.equal(out["out"], expected)


# ---- the command line on bad files ----------------------------------------------------------------------
def _one_line(capsys, argv, *needles):
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    for n in needles:
        assert n in err, err


@pytest.fixture
def report(tmp_path):
    r, _ = make()
    r.run(batch(3))
    return json.loads(save_report(r.info(), tmp_path / "good.json").read_text())


@pytest.mark.parametrize(
    "change,needle",
    [
        (lambda d: d["keys"].update({"bs=4/greedy": 3}), "keys['bs=4/greedy'] is 3"),
        (lambda d: d["keys"]["bs=4/greedy"].update(capture_ms="slow"), "capture_ms is 'slow'"),
        (lambda d: d.update(captured_keys=[1, 2]), "captured_keys"),
        (lambda d: d.update(warmup={"seconds": 1.0}), "warmup has no batch_sizes, missing"),
        (lambda d: d.update(last_memory_refusal={"key": "x"}), "last_memory_refusal has no free"),
        (lambda d: d.update(runs="many"), "runs is 'many'"),
        (lambda d: d.update(compile={"target": {"seconds": "x"}}), "compile['target'].seconds"),
        (lambda d: d.update(toggles={"fused_tail": "yes"}), "toggles"),
    ],
    ids=[
        "key-not-dict",
        "capture_ms-str",
        "captured_keys-ints",
        "warmup-fields",
        "refusal-fields",
        "runs-str",
        "compile-seconds",
        "toggles",
    ],  # fmt: skip
)
def test_report_names_the_malformed_field(tmp_path, capsys, report, change, needle):
    change(report)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(report))
    _one_line(capsys, ["report", str(path)], needle)


def test_report_on_deep_huge_and_special_files(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    _one_line(capsys, ["report", str(deep)], "nests its JSON too deeply")
    nested = tmp_path / "nested.json"
    value = 0
    for _ in range(MAX_DEPTH + 2):
        value = [value]
    nested.write_text(json.dumps({"keys": {}, "x": value}))
    _one_line(capsys, ["report", str(nested)], "too deeply")
    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:
        f.truncate(MAX_REPORT_BYTES + 1)
    _one_line(capsys, ["report", str(huge)], "larger than a report can be")
    _one_line(capsys, ["report", "/dev/zero"], "not a regular file")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    _one_line(capsys, ["report", str(fifo)], "not a regular file")  # refused without opening it (no hang)


def test_a_long_field_prints_in_bounded_time(tmp_path, capsys, report):
    import time

    report["keys"]["bs=4/greedy"]["cause"] = "x" * (4 << 20)
    path = tmp_path / "long.json"
    path.write_text(json.dumps(report))
    t0 = time.perf_counter()
    assert main(["report", str(path)]) == 0
    assert time.perf_counter() - t0 < 10
    assert "xxx..." in capsys.readouterr().out


def test_load_report_takes_a_demo_record_with_runners(tmp_path, report):
    path = tmp_path / "demo.json"
    path.write_text(json.dumps({"args": {}, "runners": [report, report]}))
    assert len(load_report(path)["runners"]) == 2


# ---- bisect and the demo on bad arguments ------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--timeout", "nan", "--", "true"], "finite number of seconds > 0"),
        (["--timeout", "inf", "--", "true"], "finite number of seconds > 0"),
        (["--timeout", "0", "--", "true"], "finite number of seconds > 0"),
        (["--timeout", "-1", "--", "true"], "finite number of seconds > 0"),
        (["--file", "/", "--", "true"], "is not a regular file"),
    ],
)
def test_bisect_refuses_bad_arguments_in_one_line(capsys, argv, needle):
    try:
        rc = main(["bisect", *argv])
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and needle in err, err


def test_bisect_never_reports_a_false_all_clear(tmp_path, capsys):
    existing = tmp_path / "out.txt"
    existing.write_text("an old result")
    assert main(["bisect", "--timeout", "60", "--file", str(existing), "--", sys.executable, "-c", "pass"]) == 2
    captured = capsys.readouterr()
    assert "did not write --file" in captured.err and "same output" not in captured.out
    assert main(["bisect", "--timeout", "60", "--", sys.executable, "-c", "raise SystemExit(3)"]) == 2
    captured = capsys.readouterr()
    assert "failed in every run" in captured.err and "same output" not in captured.out


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--batch", "1000000000"], "--batch: must be <= 1024"),
        (["--batch", "1024", "--preset", "qwen3-0.6b"], "lower --batch"),
        (["--k", "100000"], "--k: must be <= 64"),
        (["--max-new-tokens", "1000"], "lower --max-new-tokens or --k"),
        (["--seed", str(10**23)], "--seed: must be <="),
        (["--temperature", "0.5"], "--temperature: --sampling greedy does not use it"),
        (["--sampling", "temperature", "--top-p", "0.5"], "--top-p: --sampling temperature does not use it"),
        (["--sampling", "top_k", "--top-k", "5000"], "with --top-k 5000 the request's class is general"),
        (["--sampling", "top_k_top_p", "--top-p", "0.9"], "pass --sampling top_p"),
        (["--device", "cpu:1"], "the CPU has no device index"),
    ],
)
def test_demo_flags_bounded_and_checked_before_work(capsys, flags, needle):
    try:
        rc = main(["demo", "--quiet", *flags])
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and needle in err, err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_demo_json_that_fails_on_write_is_one_line(capsys):
    rc = main(["demo", "--quiet", "--max-new-tokens", "4", "--json", "/dev/full"])
    captured = capsys.readouterr()
    assert rc == 2 and "--json /dev/full could not be written" in captured.err
    assert "request 0" in captured.out  # the results came first
