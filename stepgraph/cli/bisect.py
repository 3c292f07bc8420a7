"""``python -m stepgraph bisect [--file F] -- CMD ...``: which piece changes CMD's output?

Runs CMD with every piece on (the master switch on, no piece variable set), then with each piece off
in turn, then with the master switch off (the plain path). It compares CMD's standard output (or the
file CMD writes, ``--file``) with the all-on run and prints which pieces change it. Exit status: 0 when
every run matches, 1 when some piece changes the output, 2 when CMD fails.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from stepgraph import envs


@dataclass
class Trial:
    label: str
    overrides: dict[str, str | None]
    returncode: int = 0
    digest: str = ""
    output: bytes = b""
    stderr: str = ""


def trials() -> list[Trial]:
    unset = {name: None for name in envs.PIECES}
    out = [Trial("all pieces on", {envs.MASTER: "1", **unset})]
    for name, (field, _) in envs.PIECES.items():
        out.append(Trial(f"{field} off", {envs.MASTER: "1", **unset, name: "0"}))
    out.append(Trial("all off (plain path)", {envs.MASTER: "0", **unset}))
    return out


def run_trial(trial: Trial, cmd: list[str], file: Path | None, timeout: float) -> Trial:
    if file is not None and file.exists():
        file.unlink()
    proc = subprocess.run(cmd, env=envs.child_environment(trial.overrides), capture_output=True, timeout=timeout)
    trial.returncode = proc.returncode
    trial.stderr = proc.stderr.decode(errors="replace")[-2000:]
    trial.output = (
        file.read_bytes() if file is not None and file.exists() else (b"" if file is not None else proc.stdout)
    )
    trial.digest = hashlib.sha256(trial.output).hexdigest()[:12]
    return trial


def add_parser(sub) -> None:
    p = sub.add_parser("bisect", help="run a command under each piece toggle and report which ones change its output")
    p.add_argument("--file", help="compare this file (written by the command) instead of its stdout")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per run (default 600)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepgraph bisect", description=__doc__)
    parser.add_argument("--file")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("give the command after --, e.g. python -m stepgraph bisect -- python my_decode.py")
    file = Path(args.file) if args.file else None
    console = Console()
    results = [run_trial(t, cmd, file, args.timeout) for t in trials()]
    base = results[0]
    table = Table(title=f"bisect: {' '.join(cmd)}", title_justify="left")
    for col in ("run", "exit", "output", "same as all-on"):
        table.add_column(col)
    for r in results:
        same = r.digest == base.digest and r.returncode == base.returncode
        table.add_row(r.label, str(r.returncode), r.digest, "yes" if same else "[bold red]NO[/]")
    console.print(table)
    failed = [r for r in results if r.returncode != 0]
    for r in failed:
        console.print(f"[red]{r.label}: exit {r.returncode}[/]\n{r.stderr}")
    changing = [
        r.label.removesuffix(" off") for r in results[1:] if r.digest != base.digest or r.returncode != base.returncode
    ]
    if changing:
        console.print(f"pieces that change the output: {', '.join(changing)}")
    else:
        console.print("every run gives the same output")
    return 2 if failed else (1 if changing else 0)
