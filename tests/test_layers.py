"""trtkit's and calibrators' import graph: no cycles, only downward imports, and a CLI that imports public names only.

The graph is read with ``ast`` from the source (imports at module level and inside functions, relative imports
resolved), so an import hidden in a function still counts. The layer order is :data:`LAYERS`, lowest first; a module
may import modules of its own layer and of the layers below it. The table lives in docs/architecture.md (only there).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("trtkit", "calibrators")

ARCHITECTURE = ROOT / "docs" / "architecture.md"


def read_layers(text: str) -> tuple:
    """``((layer, (module prefix, ...)), ...)``, lowest first, from the table between the ``layers`` markers."""
    block = text.split("<!-- layers:", 1)[1].split("<!-- end layers -->", 1)[0]
    rows = [line.strip().strip("|").split("|") for line in block.splitlines() if line.startswith("| ")]
    return tuple((name.strip(), tuple(re.findall(r"`([\w.]+)`", modules)))
                 for name, modules in rows[1:])  # the first row is the header


LAYERS = read_layers(ARCHITECTURE.read_text())


def module_files() -> dict:
    """Every module of :data:`PACKAGES`: dotted name -> file."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, path: Path, known: set) -> list:
    """``(line, imported module)`` for each import in ``path`` of a module in ``known`` (at any depth of the file)."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, _known_prefix(alias.name, known)) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, is_package, node)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((node.lineno, sub if sub in known else _known_prefix(target, known)))
    return [(line, name) for line, name in found if name is not None and name != module]


def _known_prefix(name: str, known: set):
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in known:
            return ".".join(parts[:end])
    return None


def layer_of(module: str):
    """``(index, layer name)`` of ``module``, or None when no prefix of :data:`LAYERS` matches it.

    A top-level package named in the table (``trtkit``) stands for its ``__init__`` only, so a new ``trtkit.x``
    gets no layer until the table names it.
    """
    best = None
    for index, (name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or (module.startswith(prefix + ".") and prefix not in ("trtkit",)):
                if best is None or len(prefix) > best[2]:
                    best = (index, name, len(prefix))
    return best[:2] if best else None


def import_graph() -> dict:
    """module -> [(line, imported module)] for every module of trtkit and calibrators."""
    files = module_files()
    return {m: imports_of(m, p, set(files)) for m, p in files.items()}


def find_cycles(graph: dict) -> list:
    """The strongly connected components with more than one module (each is at least one import cycle)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for _, target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def _where(module: str, line: int) -> str:
    return f"{module_files()[module].relative_to(ROOT)}:{line}"


def upward_imports(graph: dict) -> list:
    """One readable line per import of a higher layer."""
    problems = []
    for module, imports in sorted(graph.items()):
        own = layer_of(module)
        for line, target in imports:
            theirs = layer_of(target)
            if own and theirs and theirs[0] > own[0]:
                problems.append(f"{_where(module, line)}: {module} (layer {own[1]}) imports {target} (layer "
                                f"{theirs[1]}, above it); move the code down, or pass a callable down instead")
    return problems


def test_every_module_has_a_layer():
    missing = sorted(m for m in module_files() if layer_of(m) is None)
    assert not missing, f"modules without a layer (add their package to the table in {ARCHITECTURE}): {missing}"


def test_no_import_cycles():
    graph = import_graph()
    cycles = find_cycles(graph)
    lines = []
    for component in cycles:
        inside = set(component)
        edges = [f"{_where(m, line)} {m} -> {t}" for m in component for line, t in graph[m] if t in inside]
        lines.append(" | ".join(edges))
    assert not cycles, "import cycles (modules that import each other, directly or around a loop):\n" + "\n".join(lines)


def test_imports_only_go_down_the_layers():
    problems = upward_imports(import_graph())
    assert not problems, "imports against the layer order:\n" + "\n".join(problems)


def private_imports(module: str, path: Path) -> list:
    """One line per import in ``path`` of a ``_private`` name (or a private module outside the base layer) from a
    library module of trtkit or calibrators (CLI modules importing each other are not counted)."""
    problems = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module.startswith(PACKAGES):
            continue
        if node.module.startswith("trtkit.cli"):
            continue
        # the base layer's shared helpers (_lazy, _atomic, _device, _version_compat) serve every layer
        shared = (layer_of(node.module) or (None, ""))[1] == "base"
        private = [p for p in node.module.split(".") if p.startswith("_") and not shared]
        private += [a.name for a in node.names if a.name.startswith("_") and a.name != "__version__"]
        if private:
            problems.append(f"{path.name}:{node.lineno}: {module} imports private {private} from {node.module}")
    return problems


def test_cli_imports_only_public_names():
    problems = [line for module, path in sorted(module_files().items()) if layer_of(module)[1] == "cli"
                for line in private_imports(module, path)]
    assert not problems, "the CLI uses library internals:\n" + "\n".join(problems)


# --- the checks themselves, on made-up graphs -------------------------------------------------------------------


def test_the_layer_table_is_read_from_the_architecture_page():
    names = [name for name, _ in LAYERS]
    assert names == ["base", "model", "rewrites", "runtime", "calibrators", "builder", "tools", "cli"]
    assert dict(LAYERS)["model"] == ("trtkit.model", "trtkit.manifest", "trtkit.images", "trtkit.sample_model")


def test_the_checks_see_a_cycle_and_an_upward_import():
    graph = {"trtkit.runtime.a": [(3, "trtkit.builder.b")], "trtkit.builder.b": [(7, "trtkit.runtime.a")],
             "trtkit.errors": []}
    assert find_cycles(graph) == [["trtkit.builder.b", "trtkit.runtime.a"]]
    assert layer_of("trtkit.runtime.a") == (3, "runtime") and layer_of("trtkit.builder.b") == (5, "builder")
    assert layer_of("trtkit._version_compat") == (0, "base") and layer_of("trtkit.quant.qdq") == (2, "rewrites")
    assert layer_of("calibrators.cache") == (4, "calibrators") and layer_of("somewhere.else") is None
    assert layer_of("trtkit") == (0, "base") and layer_of("trtkit.newpackage.module") is None


@pytest.mark.parametrize(("source", "expected"), [
    ("from trtkit.runtime import runner", "trtkit.runtime.runner"),
    ("from . import graphs", "trtkit.runtime.graphs"),
    ("from .graphs import GraphCache", "trtkit.runtime.graphs"),
    ("from ..errors import CudaError", "trtkit.errors"),
    ("def f():\n    import trtkit.builder.config as c", "trtkit.builder.config"),
])
def test_imports_are_resolved(tmp_path, source, expected):
    path = tmp_path / "mod.py"
    path.write_text(source + "\n")
    known = {"trtkit.runtime.runner", "trtkit.runtime.graphs", "trtkit.errors", "trtkit.builder.config",
             "trtkit.runtime", "trtkit"}
    assert [name for _, name in imports_of("trtkit.runtime.mod", path, known)] == [expected]


def test_the_cli_check_sees_private_names(tmp_path):
    path = tmp_path / "cmd.py"
    path.write_text("from trtkit.builder.isolate import _ChildLog\nfrom trtkit.parity.metrics import _jsonable, fmt\n"
                    "from trtkit._lazy import tensorrt\nfrom trtkit.cli.render import _json_default\n")
    assert private_imports("trtkit.cli.cmd", path) == [
        "cmd.py:1: trtkit.cli.cmd imports private ['_ChildLog'] from trtkit.builder.isolate",
        "cmd.py:2: trtkit.cli.cmd imports private ['_jsonable'] from trtkit.parity.metrics",
    ]
