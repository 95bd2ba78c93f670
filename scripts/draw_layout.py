"""Draw rocketstore's package layout from its imports: docs/layout.dot and docs/layout.svg.

    python scripts/draw_layout.py            # needs grimp (the dev extra) and Graphviz's `dot`

Each box is a package, or one room of ``broker/`` (its subpackages and top modules); an arrow
A -> B means some module of A imports one of B. The graph is grimp's (the one import-linter
checks, ``importlinter.toml``); an arrow that a longer chain of arrows already implies is left
out, so what is drawn is the shape of the dependencies, top to bottom. Re-run it after moving
code and commit both files.
"""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import grimp  # noqa: E402

PACKAGE = "rocketstore"
OPENED = "rocketstore.broker"  # drawn room by room
CAPTIONS = {
    "cli": "the rocketstore command", "commands": "one module per CLI command",
    "ops": "metrics, console", "spark": "data source, sink, rebuild",
    "proxy": "RocketMQ 5.x gRPC", "client": "4.x remoting clients",
    "store": "CommitLog, queues, index", "remoting": "sans-IO codec", "filter": "SQL92",
    "format": "byte layouts", "config": "StoreConfig", "errors": "error tree",
    "broker": "Broker, BrokerConfig", "broker.wiring": "wires; handles nothing", "broker.requests": "code -> processor",
    "broker.contexts": "what each kind gets", "broker.processors": "client requests",
    "broker.admin": "mqadmin, console", "broker.namesrv": "name server",
    "broker.acl": "plain ACL", "broker.services": "puts, delay, txn, long poll",
    "broker.state": "topics, offsets, groups", "broker.server": "asyncio sockets",
    "broker.config": "BrokerConfig", "broker.replication": "master/slave rules", "broker.eventloop": "uvloop or asyncio",
}


def node_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != PACKAGE or len(parts) < 2:
        return None
    if module.startswith(OPENED + ".") and len(parts) >= 3:
        return ".".join(parts[1:3])
    return parts[1]


def edges(graph: grimp.ImportGraph) -> set[tuple[str, str]]:
    out = set()
    for module in graph.modules:
        a = node_of(module)
        for imported in graph.find_modules_directly_imported_by(module):
            b = node_of(imported)
            if a and b and a != b and b != "broker":
                out.add((a, b))
    return out


def reduce(arrows: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """Drop an arrow A -> B when another path leads from A to B."""
    succ: dict[str, set[str]] = {}
    for a, b in arrows:
        succ.setdefault(a, set()).add(b)

    def reaches(start: str, goal: str, skip: tuple[str, str]) -> bool:
        seen, todo = set(), [start]
        while todo:
            n = todo.pop()
            for m in succ.get(n, ()):
                if (n, m) == skip or m in seen:
                    continue
                if m == goal:
                    return True
                seen.add(m)
                todo.append(m)
        return False
    return {(a, b) for a, b in arrows if not reaches(a, b, (a, b))}


def dot_text(arrows: set[tuple[str, str]]) -> str:
    nodes = sorted({n for e in arrows for n in e} | {"errors", "config"})
    lines = ["digraph rocketstore {", '  rankdir=TB; nodesep=0.25; ranksep=0.45;',
             '  node [shape=box, style="rounded,filled", fillcolor="#eef3fa", color="#5b7ba6",'
             ' fontname="Helvetica", fontsize=11];',
             '  edge [color="#6b7f99", arrowsize=0.6];']
    lines.append('  subgraph cluster_broker { label="broker/"; fontname="Helvetica"; '
                 'style="rounded"; color="#a0b4cf";')
    for n in nodes:
        if n == "broker":
            lines.append(f'    "{n}" [label="__init__\\n{_caption(n)}", fillcolor="#ffffff"];')
        elif n.startswith("broker."):
            lines.append(f'    "{n}" [label="{n.split(".", 1)[1]}\\n{_caption(n)}"];')
    lines.append("  }")
    for n in nodes:
        if n != "broker" and not n.startswith("broker."):
            lines.append(f'  "{n}" [label="{n}\\n{_caption(n)}"];')
    for a, b in sorted(arrows):
        lines.append(f'  "{a}" -> "{b}";')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _caption(node: str) -> str:
    return CAPTIONS.get(node, "")


def main() -> int:
    graph = grimp.build_graph(PACKAGE, cache_dir=None)
    text = dot_text(reduce(edges(graph)))
    out = ROOT / "docs"
    (out / "layout.dot").write_text(text)
    dot = shutil.which("dot")
    if dot is None:
        print("wrote docs/layout.dot; Graphviz's dot is not installed, so no docs/layout.svg",
              file=sys.stderr)
        return 1
    svg = subprocess.run([dot, "-Tsvg"], input=text.encode(), capture_output=True, check=True)
    (out / "layout.svg").write_bytes(svg.stdout)
    print("wrote docs/layout.dot and docs/layout.svg")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
