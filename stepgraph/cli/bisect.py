"""stepgraph bisect [--file F] [--timeout S] -- CMD ...: which piece changes CMD's output?

Runs CMD with every piece on (the master switch on, no piece variable set), then with each piece off in
turn, then with the master switch off (the plain path). It compares CMD's standard output (or the file F
that CMD writes: bisect removes F before each run, and a run that does not write it is an error) with the
all-on run and prints which pieces change it.

Exit status: 0 when every run succeeds and matches, 1 when some piece changes the output, 2 when CMD
fails in some run, cannot be started, runs past --timeout or does not write F (the table shows the runs
that finished; nothing is reported as matching then).

CMD's standard output must be deterministic for this to mean anything: print results there and timings
or logs on standard error (as "python -m stepgraph demo" does).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from stepgraph import envs
from stepgraph.cli.parser import HelpFormatter, Parser
from stepgraph.config import Toggles


@dataclass
class Trial:
    label: str
    overrides: dict[str, str | None]
    returncode: int = 0
    digest: str = ""
    stderr: str = ""
    wrote_file: bool = True


def trials() -> list[Trial]:
    master = Toggles.variable("step_graph")
    pieces = {name: Toggles.variable(name) for name in Toggles.piece_names()}
    unset = {variable: None for variable in pieces.values()}
    out = [Trial("all pieces on", {master: "1", **unset})]
    for name, variable in pieces.items():
        out.append(Trial(f"{name} off", {master: "1", **unset, variable: "0"}))
    out.append(Trial("all off (plain path)", {master: "0", **unset}))
    return out


def run_trial(trial: Trial, cmd: list[str], file: Path | None, timeout: float) -> Trial:
    if file is not None and file.exists():
        file.unlink()
    proc = subprocess.run(cmd, env=envs.child_environment(trial.overrides), capture_output=True, timeout=timeout)
    trial.returncode = proc.returncode
    trial.stderr = proc.stderr.decode(errors="replace")[-2000:]
    digest = hashlib.sha256()
    if file is None:
        digest.update(proc.stdout)
    else:
        trial.wrote_file = file.is_file()
        if trial.wrote_file:
            with file.open("rb") as f:  # in chunks: a large file costs time, never memory
                while chunk := f.read(1 << 20):
                    digest.update(chunk)
    trial.digest = digest.hexdigest()[:12] if trial.wrote_file else "(no file)"
    return trial


def positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text}")
    return value


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--file", help="compare this file (written by CMD; removed before each run) instead of CMD's standard output"
    )
    p.add_argument("--timeout", type=positive_seconds, default=600.0, help="seconds each run of CMD may take")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...: the command to run under each toggle")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "bisect",
        help="run a command under each piece toggle and report which ones change its output",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    _arguments(p)


def main(argv: list[str], prog: str = "stepgraph bisect") -> int:
    parser = Parser(prog=prog, description=__doc__, formatter_class=HelpFormatter)
    _arguments(parser)
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("give the command after --, e.g. stepgraph bisect -- python my_decode.py")
    file = Path(args.file) if args.file else None
    if file is not None and file.exists() and not file.is_file():
        parser.error(f"--file {args.file} is not a regular file (a directory?); give the path CMD writes")
    console = Console()
    results: list[Trial] = []
    stopped = None
    for trial in trials():
        try:
            results.append(run_trial(trial, cmd, file, args.timeout))
        except FileNotFoundError:
            stopped = f"cannot run {cmd[0]!r}: no such program (check the command after --)"
        except PermissionError:
            stopped = f"cannot run {cmd[0]!r}: permission denied"
        except subprocess.TimeoutExpired:
            stopped = f"{trial.label}: the command ran past --timeout {args.timeout:g} s; raise --timeout"
        if stopped:
            break
    if results:
        console.print(_table(results, cmd))
    if stopped:
        print(f"{prog}: error: {stopped}", file=sys.stderr)
        return 2
    failed = [r for r in results if r.returncode != 0]
    for r in failed:
        console.print(f"[red]{r.label}: exit {r.returncode}[/]\n{r.stderr}")
    if failed:
        where = _which(failed, results)
        print(f"{prog}: error: CMD failed in {where}; its output is compared only where it succeeds", file=sys.stderr)
        return 2
    unwritten = [r for r in results if not r.wrote_file]
    if unwritten:
        where = _which(unwritten, results)
        print(f"{prog}: error: CMD did not write --file {args.file} in {where}; check the path", file=sys.stderr)
        return 2
    base = results[0]
    changing = [r.label.removesuffix(" off") for r in results[1:] if not _same(r, base)]
    if changing:
        console.print(f"pieces that change the output: {', '.join(changing)}")
        return 1
    console.print("every run gives the same output")
    return 0


def _which(some: list[Trial], results: list[Trial]) -> str:
    if len(some) == len(results):
        return f"every run ({len(results)})"
    return f"{len(some)} of {len(results)} runs: " + ", ".join(r.label for r in some)


def _same(r: Trial, base: Trial) -> bool:
    return r.digest == base.digest and r.returncode == base.returncode


def _table(results: list[Trial], cmd: list[str]) -> Table:
    table = Table(title=f"bisect: {' '.join(cmd)}", title_justify="left")
    for col in ("run", "exit", "output", "same as all-on"):
        table.add_column(col, overflow="fold")
    for r in results:
        table.add_row(r.label, str(r.returncode), r.digest, "yes" if _same(r, results[0]) else "[bold red]NO[/]")
    return table
