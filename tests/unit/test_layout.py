"""The house stays in order: no import cycle between modules (imports inside functions count), and the
kernels sit below the framework that uses them."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "stepgraph"


def modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        found[".".join(("stepgraph", *parts)).removesuffix(".__init__")] = path
    return found


def imported(path: pathlib.Path, name: str) -> set[str]:
    """Every module name ``name`` imports: at module level, inside functions, and under ``TYPE_CHECKING``
    (a module that names another in its annotations knows it as well)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    todo = list(ast.parse(path.read_text()).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
        todo.extend(ast.iter_child_nodes(node))
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    edges = {name: {t for t in imported(path, name) if t in mods and t != name} for name, path in mods.items()}
    # a package's __init__ re-exporting its modules is not a cycle of ideas: drop edges into packages
    return {n: {t for t in deps if mods[t].name != "__init__.py"} for n, deps in edges.items()}


def test_no_import_cycles():
    edges = graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(n, path):
        state[n] = 1
        for t in sorted(edges[n]):
            if state.get(t) == 1:
                cycles.append(" -> ".join([*path[path.index(t) :], t]))
            elif t not in state:
                visit(t, [*path, t])
        state[n] = 2

    for n in sorted(edges):
        if n not in state:
            visit(n, [n])
    assert cycles == []


def test_the_cycle_finder_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a.hidden\n"
        "def f():\n    from a import inner\n    import a.deep\n"
    )
    assert imported(module, "a.m") >= {"a.inner", "a.deep", "a.hidden"}


def test_the_kernels_import_nothing_from_the_framework():
    """``stepgraph.kernels`` is the floor: launchers, references and their helpers take options as
    arguments, and the framework above imports them, never the other way round."""
    mods = modules()
    found = {}
    for name, path in mods.items():
        if name.startswith("stepgraph.kernels"):
            above = {
                m for m in imported(path, name) if m.startswith("stepgraph") and not m.startswith("stepgraph.kernels")
            }
            if above:
                found[name] = sorted(above)
    assert found == {}


def test_only_the_command_line_imports_the_examples():
    """The examples are users of the framework (the demo runs one); the framework never needs them."""
    mods = modules()
    found = {n: sorted(m for m in imported(p, n) if m.startswith("stepgraph.examples")) for n, p in mods.items()}
    assert {n: m for n, m in found.items() if m and not n.startswith(("stepgraph.examples", "stepgraph.cli"))} == {}
