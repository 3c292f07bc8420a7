"""Saved reports: ``runner.info()`` (or a demo or benchmark record holding ``runners: [...]``) as JSON, and
reading one back with bounds and checks, so that ``stepgraph report FILE`` answers any file in one line.

Limits on what is read: a regular file (not a directory, a pipe or a device) of at most
:data:`MAX_REPORT_BYTES`, UTF-8 JSON nested at most :data:`MAX_DEPTH` deep, whose known fields have the
types ``runner.info()`` writes.
"""

from __future__ import annotations

import json
import numbers
import os
import stat
from pathlib import Path

#: The largest report file read (a real report is a few kilobytes per key).
MAX_REPORT_BYTES = 16 << 20
#: The deepest nesting of JSON read (a real report nests five levels).
MAX_DEPTH = 32

HINT = "write one with stepgraph.report_file.save_report(runner.info(), path) or demo --json"

_NUMBER = "a number"
_TEXT = "a string"
#: The known fields of one runner's info, and of each key's entry: field -> what it must be (``None``
#: is allowed for every field, as ``runner.info()`` writes it where a figure is unknown).
_RUNNER_FIELDS = {
    "runs": _NUMBER, "replays": _NUMBER, "eager_runs": _NUMBER, "oversize_runs": _NUMBER, "padded_rows": _NUMBER,
    "memory_refusals": _NUMBER, "cache_releases": _NUMBER, "cache_release_budget_left": _NUMBER,
    "capture_failures": _NUMBER, "graph_pool_bytes": _NUMBER, "num_alloc_retries": _NUMBER, "num_ooms": _NUMBER,
    "process_gpu_memory": _NUMBER, "max_batch_size": _NUMBER, "name": _TEXT, "device": _TEXT,
    "graphs_unavailable_reason": _TEXT,
}  # fmt: skip
_KEY_FIELDS = {
    "status": _TEXT, "pool_bytes": _NUMBER, "warmup_peak_bytes": _NUMBER, "capture_ms": _NUMBER,
    "instantiate_ms": _NUMBER, "warmup_ms": _NUMBER, "compile_s": _NUMBER, "replays": _NUMBER,
    "eager_runs": _NUMBER, "padded_rows": _NUMBER, "refusals": _NUMBER, "failures": _NUMBER, "error": _TEXT,
    "cause": _TEXT,
}  # fmt: skip
_WARMUP_FIELDS = {"seconds": _NUMBER, "compile_seconds": _NUMBER}
_REFUSAL_FIELDS = {"key": _TEXT, "free": _NUMBER, "needed": _NUMBER, "reserved": _NUMBER, "allocated": _NUMBER}
_COMPILE_FIELDS = {"backend": _TEXT, "compiles": _NUMBER, "seconds": _NUMBER, "failures": _NUMBER, "error": _TEXT}


def save_report(info: dict, path: str | Path, **extra) -> Path:
    """Write ``info`` (plus ``extra`` top-level fields) as JSON; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**info, **extra}, indent=2, default=str))
    return path


def load_report(path: str | Path) -> dict:
    """A saved report (:func:`save_report`, ``runner.info()`` as JSON, or ``demo --json``).

    Raises
    ------
    ValueError
        One line naming the problem: a missing file, a directory, a pipe or a device, a file over
        :data:`MAX_REPORT_BYTES`, an empty, truncated or binary file, JSON nested past :data:`MAX_DEPTH`,
        JSON that is not a stepgraph report, or a field of the wrong type (named by its path).
    """
    path = Path(path)
    text = _read_bounded(path)
    if not text.strip():
        raise ValueError(f"{path} is empty; {HINT}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); truncated?") from None
    except RecursionError:
        raise ValueError(f"{path} nests its JSON too deeply to be a report (limit {MAX_DEPTH} levels)") from None
    if _depth(data) > MAX_DEPTH:
        raise ValueError(f"{path} nests its JSON too deeply to be a report (limit {MAX_DEPTH} levels)")
    reports = data.get("runners", [data]) if isinstance(data, dict) else None
    if (
        not isinstance(reports, list)
        or not reports
        or not all(isinstance(r, dict) and isinstance(r.get("keys"), dict) for r in reports)
    ):
        raise ValueError(f"{path} is not a stepgraph report (no per-key 'keys' table); {HINT}")
    for i, info in enumerate(reports):
        where = "" if reports[0] is data else f"runners[{i}]."
        problem = _check_info(info)
        if problem:
            raise ValueError(f"{path}: {where}{problem}; is it a stepgraph report written by this version?")
    return data


def runner_infos(report: dict) -> list[dict]:
    """A saved file holds one runner's info, or a demo/bench record with ``runners: [...]``."""
    return list(report.get("runners", [])) or [report]


def _read_bounded(path: Path) -> str:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file; {HINT}") from None
    except OSError as e:
        raise ValueError(f"{path} cannot be read: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{path} is a directory; give the report's JSON file")
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{path} is not a regular file (a pipe or a device?); give the report's JSON file")
    if st.st_size > MAX_REPORT_BYTES:
        raise ValueError(
            f"{path} is {st.st_size / 2**20:.1f} MiB: larger than a report can be ({MAX_REPORT_BYTES >> 20} MiB)"
        )
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_REPORT_BYTES + 1)
    except OSError as e:
        raise ValueError(f"{path} cannot be read: {e.strerror or e}") from None
    if len(raw) > MAX_REPORT_BYTES:
        raise ValueError(f"{path} is larger than a report can be ({MAX_REPORT_BYTES >> 20} MiB)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not text (a binary file?); {HINT}") from None


def _depth(value, limit: int = MAX_DEPTH + 1) -> int:
    """How deep ``value`` nests (counting stops past ``limit``), without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            if d > limit:
                return d
            todo.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def _kind_ok(value, kind: str) -> bool:
    if value is None:
        return True
    if kind == _NUMBER:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    return isinstance(value, str)


def _fields(entry: dict, spec: dict, where: str) -> str | None:
    for name, kind in spec.items():
        if name in entry and not _kind_ok(entry[name], kind):
            return f"{where}{name} is {_shown(entry[name])}, not {kind}"
    return None


def _check_info(info: dict) -> str | None:
    """The first field of one runner's info that ``runner.info()`` would not write, or ``None``."""
    problem = _fields(info, _RUNNER_FIELDS, "")
    if problem:
        return problem
    for name, key in info["keys"].items():
        if not isinstance(key, dict):
            return f"keys[{name!r}] is {_shown(key)}, not an object"
        problem = _fields(key, _KEY_FIELDS, f"keys[{name!r}].")
        if problem:
            return problem
    captured = info.get("captured_keys", [])
    if not isinstance(captured, list) or not all(isinstance(k, str) for k in captured):
        return f"captured_keys is {_shown(captured)}, not a list of key names"
    for name in ("buckets", "suggested_buckets"):
        value = info.get(name, [])
        if not isinstance(value, list) or not all(_kind_ok(v, _NUMBER) for v in value):
            return f"{name} is {_shown(value)}, not a list of batch sizes"
    for name, spec, required in (
        ("warmup", _WARMUP_FIELDS, ("batch_sizes", "seconds", "missing")),
        ("last_memory_refusal", _REFUSAL_FIELDS, ("key", "free", "needed", "reserved", "allocated")),
    ):
        entry = info.get(name)
        if entry is None:
            continue
        if not isinstance(entry, dict):
            return f"{name} is {_shown(entry)}, not an object"
        missing = [f for f in required if f not in entry]
        if missing:
            return f"{name} has no {', '.join(missing)}"
        problem = _fields(entry, spec, f"{name}.")
        if problem:
            return problem
        if name == "warmup" and not (isinstance(entry["batch_sizes"], list) and isinstance(entry["missing"], list)):
            return "warmup.batch_sizes and warmup.missing must be lists"
    compiled = info.get("compile")
    if compiled is not None:
        if not isinstance(compiled, dict) or not all(isinstance(c, dict) for c in compiled.values()):
            return f"compile is {_shown(compiled)}, not an object of objects"
        for forward, c in compiled.items():
            problem = _fields(c, _COMPILE_FIELDS, f"compile[{forward!r}].")
            if problem:
                return problem
    toggles = info.get("toggles")
    if toggles is not None and (
        not isinstance(toggles, dict) or not all(isinstance(v, bool) for v in toggles.values())
    ):
        return f"toggles is {_shown(toggles)}, not an object of booleans"
    return None


def _shown(value) -> str:
    text = repr(value)
    return (text[:60] + "...") if len(text) > 60 else text + f" (a {type(value).__name__})"
