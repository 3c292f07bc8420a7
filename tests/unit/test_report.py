import json

from rich.console import Console

from stepgraph.cli import main
from stepgraph.report import print_report
from stepgraph.report_file import load_report, save_report
from tests.unit.test_runner import batch, make


def test_report_roundtrip_and_cli(tmp_path, capsys):
    r, _ = make()
    r.run(batch(3))
    path = save_report(r.info(), tmp_path / "r.json")
    data = load_report(path)
    assert data["keys"]["bs=4/greedy"]["eager_runs"] == 1
    console = Console(record=True, width=160)
    print_report(data, console=console)
    text = console.export_text()
    assert "bs=4/greedy" in text and "memory refusals" in text
    assert main(["report", str(path)]) == 0
    assert "bs=4/greedy" in capsys.readouterr().out


def test_report_rejects_other_json(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"hello": 1}))
    import pytest

    with pytest.raises(ValueError, match="not a stepgraph report"):
        load_report(p)


def test_the_summary_suggests_buckets_only_when_they_pad_fewer_rows():
    def summary(sizes):
        r, _ = make()  # buckets 1, 2, 4, 8
        for n in sizes:
            r.run(batch(n))
        console = Console(record=True, width=200)
        print_report(r.info(), console=console)
        return next(line for line in console.export_text().splitlines() if "suggested buckets" in line)

    assert "[3, 5] (padded rows 0 instead of 5 " in summary([3, 3, 5])
    assert "the current ones (padded rows 0: the fewest" in summary([2, 4, 4])
