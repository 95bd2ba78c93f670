"""Imports run one way: import-linter's contracts (``importlinter.toml``: layers, forbidden,
independence) over every package, and no import circle inside any package (grimp, the graph
import-linter itself builds). Two checks of the checks plant a back edge and a circle in a
throw-away package and expect both to be caught."""
from __future__ import annotations

import pathlib
import sys
import textwrap

import grimp
from importlinter import cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = ROOT / "importlinter.toml"


def circles(package: str) -> list[tuple[str, str]]:
    """Pairs of modules of one subpackage (``package.X...``) that import each other, directly or
    through other modules (type-checking imports included: they are imports too)."""
    graph = grimp.build_graph(package, cache_dir=None)
    found = set()
    for module in graph.modules:
        room = module.split(".")[:2]
        for imported in graph.find_modules_directly_imported_by(module):
            if imported.split(".")[:2] == room and imported != module and \
                    graph.chain_exists(importer=imported, imported=module):
                found.add(tuple(sorted((module, imported))))
    return sorted(found)


def lint(config: pathlib.Path) -> int:
    return cli.lint_imports(config_filename=str(config), no_cache=True, no_logo=True)


def test_import_contracts_are_kept(capsys):
    code = lint(CONFIG)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 broken" in out


def test_no_import_circle_inside_any_package():
    found = circles("rocketstore")
    assert not found, "modules that import each other:\n" + "\n".join(
        f"  {a} <-> {b}" for a, b in found)


def _plant(tmp_path: pathlib.Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = tmp_path / "planted" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_checks_catch_a_back_edge_and_a_circle(tmp_path, capsys, monkeypatch):
    _plant(tmp_path, {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/a.py": "from . import b\n",  # a circle inside planted.low ...
        "low/b.py": "from . import a\nfrom ..high import top\n",  # ... and an arrow back up
        "high/__init__.py": "",
        "high/top.py": "from ..low import a\n",
    })
    (tmp_path / "contracts.toml").write_text(textwrap.dedent("""
        [tool.importlinter]
        root_packages = ["planted"]

        [[tool.importlinter.contracts]]
        name = "high over low"
        type = "layers"
        layers = ["planted.high", "planted.low"]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert lint(tmp_path / "contracts.toml") == 1
        assert "planted.low.b -> planted.high.top" in capsys.readouterr().out
        assert ("planted.low.a", "planted.low.b") in circles("planted")
    finally:
        for name in [m for m in sys.modules if m == "planted" or m.startswith("planted.")]:
            del sys.modules[name]
