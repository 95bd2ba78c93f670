"""Imports run one way (STYLE.md §7.1): a back edge fails this test."""
import ast
import pathlib

PKG = pathlib.Path(__file__).resolve().parents[1] / "src" / "rocketstore"

# a module in the key package may not import from any package in the value set
FORBIDDEN = {
    "format": {"store", "broker", "client", "spark", "remoting", "commands", "cli", "ops"},
    "store": {"broker", "client", "spark", "remoting", "commands", "cli", "ops"},
    "remoting": {"store", "broker", "client", "spark", "commands", "cli", "ops"},
    "client": {"store", "broker", "spark", "commands", "cli", "ops"},
    "broker": {"spark", "commands", "cli", "client", "ops"},
    "spark": {"broker", "remoting", "commands", "cli", "ops"},  # network source: over client
    "ops": {"spark", "commands", "cli"},
    "proxy": {"spark", "client", "remoting", "commands", "cli", "ops"},
}
NO_IO_IN = {"format": {"socket", "asyncio", "mmap", "pyspark"}, "remoting": {"socket", "asyncio"}}


def _imports(path: pathlib.Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel = path.relative_to(PKG).parts
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(rel[:-1])[: len(rel) - node.level]
                mod = ".".join(["rocketstore", *base] + ([node.module] if node.module else []))
                yield mod
                if not node.module:
                    for a in node.names:
                        yield f"{mod}.{a.name}"
            else:
                yield node.module or ""


def test_no_back_edges():
    bad = []
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG).parts
        if len(parts) < 2:
            continue
        pkg = parts[0]
        for mod in _imports(path):
            segs = mod.split(".")
            if segs[0] == "rocketstore" and len(segs) > 1 and segs[1] in FORBIDDEN.get(pkg, ()):
                bad.append(f"{path.relative_to(PKG)} imports {mod}")
            if segs[0] in NO_IO_IN.get(pkg, ()):
                bad.append(f"{path.relative_to(PKG)} imports {mod} (I/O in a pure package)")
    assert not bad, "\n".join(bad)
