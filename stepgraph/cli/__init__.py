"""The stepgraph command line: demo, report, kernels, bisect.

Ordinary mistakes (a missing or unreadable report, a bad flag value) end with one line naming what to
change and exit status 2; a traceback means a bug.
"""

from __future__ import annotations

import argparse
import sys

from stepgraph.cli.parser import HelpFormatter, Parser

DESCRIPTION = (
    "stepgraph: capture each speculative decode step as one CUDA graph. "
    "Run 'demo' for the main job; 'COMMAND --help' for each command's flags."
)


def build_parser(prog: str) -> argparse.ArgumentParser:
    from stepgraph import __version__
    from stepgraph.cli import bisect, demo
    from stepgraph.report_file import MAX_DEPTH, MAX_REPORT_BYTES

    parser = Parser(prog=prog, description=DESCRIPTION, formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"stepgraph {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo.add_parser(sub)
    bisect.add_parser(sub)
    sub.add_parser(
        "report",
        help="print a saved capture report (JSON from runner.info() or demo --json)",
        description=f"Print a saved capture report: a regular file of at most {MAX_REPORT_BYTES >> 20} MiB of "
        f"JSON nested at most {MAX_DEPTH} levels, written by runner.info() (stepgraph.report_file.save_report) "
        "or demo --json.",
        formatter_class=HelpFormatter,
    ).add_argument("file", help="the JSON file")
    sub.add_parser("kernels", help="print the kernel inventory", formatter_class=HelpFormatter)
    parser.commands = sub.choices  # each command's parser, by name
    return parser


def main(argv: list[str] | None = None, prog: str = "stepgraph") -> int:
    """Run one command; returns the exit status (0 ok, 1 bisect found a change, 2 a usage error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(prog)
    if argv[:1] == ["bisect"]:  # everything after "--" is the command to bisect, flags included
        from stepgraph.cli import bisect

        return bisect.main(argv[1:], prog=f"{prog} bisect")
    args, extra = parser.parse_known_args(argv)
    if extra:  # answered by the command's own parser, which names the command
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if args.command == "report":
            from stepgraph.report import print_report
            from stepgraph.report_file import load_report, runner_infos

            for info in runner_infos(load_report(args.file)):
                print_report(info)
            return 0
        if args.command == "kernels":
            from stepgraph.kernels.inventory import print_inventory

            print_inventory()
            return 0
        from stepgraph.cli import demo

        return demo.run(args)
    except ValueError as e:  # what the user gave cannot be used: say what to change
        print(f"{prog} {args.command}: error: {e}", file=sys.stderr)
        return 2
