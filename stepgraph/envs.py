"""The only place stepgraph reads environment variables.

Which variables exist, and what each switches, is declared once, beside the setting it drives
(:class:`stepgraph.config.Toggles`); this module reads and validates them. A ``STEPGRAPH_*`` variable that
is not declared, or a value other than ``0``/``1``, raises :class:`EnvError` naming the valid choices, so a
typo never silently does nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

PREFIX = "STEPGRAPH_"


class EnvError(ValueError):
    """A ``STEPGRAPH_*`` variable is unknown or has a bad value."""


def _parse_bool(name: str, value: str) -> bool | None:
    value = value.strip()
    if value == "":
        return None
    if value in ("0", "1"):
        return value == "1"
    raise EnvError(f"{name}={value!r} is not valid: use 0 (off) or 1 (on), or unset it to follow the default")


def read_switches(declared: Iterable[str], environ: Mapping[str, str] | None = None) -> dict[str, bool | None]:
    """The value of each declared ``STEPGRAPH_*`` switch: ``True`` (``1``), ``False`` (``0``) or ``None``
    (unset or empty).

    Raises
    ------
    EnvError
        For a ``STEPGRAPH_*`` name that is not declared, or a value other than ``0``/``1``.
    """
    env = os.environ if environ is None else environ
    declared = list(declared)
    unknown = sorted(k for k in env if k.startswith(PREFIX) and k not in declared)
    if unknown:
        raise EnvError(f"unknown stepgraph variable(s) {', '.join(unknown)}; valid names are: {', '.join(declared)}")
    return {name: _parse_bool(name, env.get(name, "")) for name in declared}


def child_environment(overrides: Mapping[str, str | None]) -> dict[str, str]:
    """A copy of this process's environment with ``overrides`` applied (``None`` removes a name).

    Used by ``stepgraph bisect`` to run a command under each toggle combination.
    """
    env = dict(os.environ)
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env
