#!/usr/bin/env python3
"""Import graph among tuner modules, function-local imports included: prints the cycles (exit 1 if any).

python scripts/import_graph.py [tuner] [-v]     # -v: every module and what it imports
"""

import ast
import pathlib
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "tuner")


def modname(p):
    parts = list(p.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


mods = {modname(p.relative_to(root.parent)): p for p in root.rglob("*.py")}
edges = {m: set() for m in mods}
for m, p in mods.items():
    pkg = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
    for n in ast.walk(ast.parse(p.read_text())):
        if isinstance(n, ast.ImportFrom):
            if n.level:
                base = pkg.split(".")
                base = base[: len(base) - (n.level - 1)]
                tgt = ".".join(base + ([n.module] if n.module else []))
            else:
                tgt = n.module or ""
            subs = [f"{tgt}.{a.name}" for a in n.names]
            cands = subs if all(s in mods for s in subs) else [tgt] + subs
        elif isinstance(n, ast.Import):
            cands = [a.name for a in n.names]
        else:
            continue
        for c in cands:
            if c in mods and c != m:
                edges[m].add(c)
# parent package __init__ is imported implicitly; ignore for cycle detection
sys.setrecursionlimit(10000)
index, low, stack, on, sccs, i = {}, {}, [], set(), [], [0]


def strong(v):
    index[v] = low[v] = i[0]
    i[0] += 1
    stack.append(v)
    on.add(v)
    for w in edges[v]:
        if w not in index:
            strong(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop()
            on.discard(w)
            comp.append(w)
            if w == v:
                break
        if len(comp) > 1:
            sccs.append(comp)


for v in edges:
    if v not in index:
        strong(v)
print("cycles:", sccs or "none")
if "-v" in sys.argv:
    for m in sorted(edges):
        print(m, "->", ", ".join(sorted(edges[m])))
sys.exit(1 if sccs else 0)
