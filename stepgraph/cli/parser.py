"""The command line's argument parser: one-line errors and help that fits 80 columns."""

from __future__ import annotations

import argparse
import shutil
import textwrap


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error: ``PROG: error: MESSAGE (see PROG --help)``, exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Help at most 80 columns wide, paragraphs of the description kept, and every flag's default shown."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=min(80, shutil.get_terminal_size((80, 24)).columns), max_help_position=30)

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False or "(default" in (action.help or ""):
            return action.help or ""
        return super()._get_help_string(action)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = textwrap.dedent(text).strip().split("\n\n")
        return "\n\n".join(textwrap.fill(" ".join(p.split()), width, initial_indent=indent,
                                           subsequent_indent=indent) for p in paragraphs)  # fmt: skip
