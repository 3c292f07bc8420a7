"""``python -m stepgraph {demo, report, kernels, bisect}``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m stepgraph", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    from stepgraph.cli import bisect, demo

    demo.add_parser(sub)
    bisect.add_parser(sub)
    rep = sub.add_parser("report", help="print a saved capture report (JSON from runner.info() or --json)")
    rep.add_argument("file")
    sub.add_parser("kernels", help="print the kernel inventory")

    if argv[:1] == ["bisect"]:  # everything after "--" is the command to bisect
        return bisect.main(argv[1:])
    args = parser.parse_args(argv)
    if args.command == "report":
        from stepgraph.report import load_report, print_report, runner_infos

        for info in runner_infos(load_report(args.file)):
            print_report(info)
        return 0
    if args.command == "kernels":
        from stepgraph.kernels.inventory import print_inventory

        print_inventory()
        return 0
    if args.command == "demo":
        try:
            return demo.run(args)
        except ValueError as e:  # a flag combination the models or the decoder refuse: say what to change
            print(f"python -m stepgraph demo: error: {e}", file=sys.stderr)
            return 2
    parser.error(f"unknown command {args.command}")
    return 2
