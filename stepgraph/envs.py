"""The only place stepgraph reads environment variables.

Every ``STEPGRAPH_*`` variable is declared here, validated here, and documented in the README table
(generated from :data:`VARIABLES`). A variable that is not declared, or a value other than ``0``/``1``,
raises :class:`EnvError` naming the valid choices, so a typo never silently does nothing.

Piece toggles have three states: unset (follow the master switch), ``0`` (off even under the switch),
``1`` (on even without it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

PREFIX = "STEPGRAPH_"

MASTER = "STEPGRAPH_ENABLE"
DEBUG = "STEPGRAPH_DEBUG"

#: Piece toggles: environment variable -> (config field, what it switches).
PIECES: dict[str, tuple[str, str]] = {
    "STEPGRAPH_FUSED_GREEDY_VERIFY": (
        "fused_greedy_verify",
        "greedy verify: one fused two-stage Triton argmax + chain acceptance (off: torch composite)",
    ),
    "STEPGRAPH_TWO_LAUNCH_SAMPLING": (
        "two_launch_sampling",
        "stepgraph's sampling kernel wherever it applies: the lean sampled verify and the prefill's first "
        "sampled token (off: their torch implementations; the general tree path is torch either way)",
    ),
    "STEPGRAPH_LEAN_SAMPLED_VERIFY": (
        "lean_sampled_verify",
        "sampled verify specialised for chains (off: the general tree path over materialised probabilities)",
    ),
    "STEPGRAPH_FUSED_TAIL": (
        "fused_tail",
        "every topk-1 draft token from the two-stage Triton argmax: the K-1 draft steps and the draft-extend "
        "tail, whose launch also gathers the selected hidden rows (off: torch argmax and indexing)",
    ),
    "STEPGRAPH_FUSED_RELAY": (
        "fused_relay",
        "relay traffic in one launch each: the step's gather of its requests' slots and its store into them; "
        "a batch of one reads and writes slot 0 through views, no launch (off: one copy per field)",
    ),
    "STEPGRAPH_ONE_LAUNCH_COPY": (
        "one_launch_copy",
        "the runner's copy-in: every input of a run and its padding in one launch, made one launch with the "
        "key's graph where that graph draws nothing from torch's generators (off: one copy per tensor)",
    ),
    "STEPGRAPH_COMPILE": (
        "compile_forwards",
        "torch.compile (inductor's kernels, captured into the step graph) of the target and draft forwards of a "
        "decoder built with compile=True (off: the forwards run as written)",
    ),
    "STEPGRAPH_TP_BROADCAST": (
        "tp_broadcast",
        "one packed broadcast of the verify result across tensor-parallel ranks (off: one per field)",
    ),
}

#: Every declared variable -> one-line description (the README table is generated from this).
VARIABLES: dict[str, str] = {
    MASTER: "master switch: capture each step as one CUDA graph and turn every piece on (default 1)",
    **{name: desc for name, (_, desc) in PIECES.items()},
    DEBUG: "debug mode: outputs handed out by run() are copies that are poisoned on the next run (default 0)",
}


class EnvError(ValueError):
    """A ``STEPGRAPH_*`` variable is unknown or has a bad value."""


@dataclass(frozen=True)
class EnvSettings:
    """What the environment says; ``None`` means unset."""

    master: bool | None
    pieces: Mapping[str, bool | None]  # keyed by config field name
    debug: bool | None


def _parse_bool(name: str, value: str) -> bool | None:
    value = value.strip()
    if value == "":
        return None
    if value in ("0", "1"):
        return value == "1"
    raise EnvError(f"{name}={value!r} is not valid: use 0 (off) or 1 (on), or unset it to follow the default")


def read(environ: Mapping[str, str] | None = None) -> EnvSettings:
    """Read and validate every ``STEPGRAPH_*`` variable.

    Raises
    ------
    EnvError
        For an unknown ``STEPGRAPH_*`` name or a value other than ``0``/``1``.
    """
    env = os.environ if environ is None else environ
    unknown = sorted(k for k in env if k.startswith(PREFIX) and k not in VARIABLES)
    if unknown:
        valid = ", ".join(VARIABLES)
        raise EnvError(f"unknown stepgraph variable(s) {', '.join(unknown)}; valid names are: {valid}")
    pieces = {field: _parse_bool(name, env.get(name, "")) for name, (field, _) in PIECES.items()}
    return EnvSettings(
        master=_parse_bool(MASTER, env.get(MASTER, "")),
        pieces=pieces,
        debug=_parse_bool(DEBUG, env.get(DEBUG, "")),
    )


#: Values Triton takes as true for its boolean variables (case-insensitive); anything else is false.
TRITON_TRUE = ("1", "true", "on", "yes")


def triton_interpret(environ: Mapping[str, str] | None = None) -> bool:
    """Whether Triton runs kernels through its CPU interpreter: ``TRITON_INTERPRET`` read as Triton reads
    it (``1``, ``true``, ``on``, ``yes`` in any case; ``false``, ``abc`` or unset are off). Asks Triton
    itself where it can (``triton.knobs``, Triton >= 3.3)."""
    if environ is None:
        try:
            from triton import knobs

            return bool(knobs.runtime.interpret)
        except (ImportError, AttributeError):
            environ = os.environ
    return environ.get("TRITON_INTERPRET", "").lower() in TRITON_TRUE


def piece_variable(field: str) -> str:
    """The environment variable that toggles the piece stored in config field ``field``."""
    for name, (f, _) in PIECES.items():
        if f == field:
            return name
    raise KeyError(field)


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
