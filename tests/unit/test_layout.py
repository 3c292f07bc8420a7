"""The codebase stays readable: no import cycle between modules, no module that has grown a second idea."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = {
    "stepgraph": ROOT / "stepgraph",
    "stepgraph.kernels": ROOT / "kernels",
    "stepgraph.examples": ROOT / "examples",
}


def modules() -> dict[str, pathlib.Path]:
    found = {}
    for prefix, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            name = ".".join((prefix, *parts)).removesuffix(".__init__")
            if prefix == "stepgraph" and parts[:1] in (("kernels",), ("examples",)):
                continue
            found[name] = path
    return found


def module_level_imports(path: pathlib.Path, name: str, known: set[str]) -> set[str]:
    """Modules of ours imported when ``name`` is imported (not inside functions or TYPE_CHECKING)."""
    out = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        out |= {t for t in targets if t in known and t != name}
    return out


def test_no_import_cycles():
    mods = modules()
    graph = {name: module_level_imports(path, name, set(mods)) for name, path in mods.items()}
    # a package's __init__ re-exporting its modules is not a cycle of ideas: drop edges into packages
    graph = {n: {t for t in deps if mods[t].name != "__init__.py"} for n, deps in graph.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(n, path):
        state[n] = 1
        for t in graph[n]:
            if state.get(t) == 1:
                cycles.append(" -> ".join([*path[path.index(t) :], t]))
            elif t not in state:
                visit(t, [*path, t])
        state[n] = 2

    for n in graph:
        if n not in state:
            visit(n, [n])
    assert cycles == []


def test_no_module_has_outgrown_one_idea():
    long = {str(p.relative_to(ROOT)): n for p in modules().values() if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}
