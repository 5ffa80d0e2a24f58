"""The house's rules on imports: arrows point down, and the report, the lab and the CLI reach the engine only
through the names `corpus.engine` lists."""

from __future__ import annotations

import ast
from pathlib import Path

from support import REPO

import corpus.engine


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import in a file, at any depth (lazy imports count)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
    return found


def _files(*folders: str) -> list[Path]:
    return [path for folder in folders for path in sorted((REPO / folder).rglob("*.py"))]


def test_config_imports_no_engine_nor_lab_and_stages_rules_text_models_import_neither():
    for path in _files("corpus/config"):
        assert not [m for m, _ in _imports(path) if m.startswith(("corpus.engine", "corpus.lab"))], path
    for path in _files("stages", "rules", "corpus/text", "corpus/models"):
        upward = [m for m, _ in _imports(path) if m.startswith(("corpus.engine", "corpus.config", "corpus.lab"))]
        assert not upward, (path, upward)


def test_report_lab_and_cli_use_only_the_engines_named_surface():
    surface = set(corpus.engine.__all__)
    users = _files("corpus/report", "corpus/lab") + sorted((REPO / "corpus").glob("cli*.py"))
    assert len(users) > 15
    for path in users:
        for module, names in _imports(path):
            if module.startswith("corpus.engine"):
                assert module == "corpus.engine", f"{path.name} imports {module}: use a name corpus.engine lists"
                assert set(names) <= surface, (path.name, set(names) - surface)
    for name in surface:
        assert getattr(corpus.engine, name) is not None


def test_the_cli_modules_do_not_import_each_other_in_a_circle():
    graph = {
        path.stem: {m.rsplit(".", 1)[-1] for m, _ in _imports(path) if m.startswith("corpus.cli")}
        for path in (REPO / "corpus").glob("cli*.py")
    }
    for module, imported in graph.items():
        for other in imported:
            assert module not in graph.get(other, set()), f"{module} and {other} import each other"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    parts = ["corpus", *parts] if parts[0] in ("stages", "rules") else parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group, member = set(), None
            while member != node:
                member = stack.pop()
                group.add(member)
            if len(group) > 1:
                cycles.append(group)

    for node in graph:
        if node not in index:
            visit(node)
    return cycles


def test_no_two_rooms_import_each_other_in_a_circle():
    """A circle inside one folder is one idea in several files; across rooms (corpus.api and corpus.file_documents
    were one) it breaks the arrows' direction. Each top-level module of corpus/ is a room of its own."""
    files = {_module_name(path): path for path in _files("corpus", "stages", "rules")}

    def known(module: str) -> str:
        while module and module not in files:
            module = module.rpartition(".")[0]
        return module

    graph = {
        name: {known(m) for m, _ in _imports(path) if m.startswith("corpus")} - {"", name}
        for name, path in files.items()
    }

    def room(module: str) -> str:
        path = files[module]
        return module if path.parent == REPO / "corpus" else str(path.parent)

    across = [sorted(group) for group in _import_cycles(graph) if len({room(m) for m in group}) > 1]
    assert across == []
    assert "corpus.api" not in graph["corpus.file_documents"]
