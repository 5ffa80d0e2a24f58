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
