#!/usr/bin/env python3
"""Module dependency graph of one crate's src/ and its import cycles.

Every module is a node, inside folders too (`pipeline::state`; a folder's mod.rs is the folder's
own node, `pipeline`). An edge a -> b means a file of module `a` names module `b` or an item of
it: in a `use` statement (nested braces included) or inline, by a `crate::`, `super::` or
`self::` path or by the name of one of its child modules. A module's references to its own
descendants are not edges (a parent declares its children); a child's references to its
parent are. Comments (//, //!, ///, /* */) and string literals are stripped first, so doc links
do not count. Edges found only inside `#[cfg(test)]` modules are reported separately.

usage: modcycles.py <crate>/src   (exit 1 when non-test code has a cycle; scripts/test.sh runs it)
       modcycles.py --self-test   (the checker finds a cycle it must find)
"""

import re
import sys
from pathlib import Path


def self_test():
    """The checker finds what it must: a cycle between two files of a folder through `super::`
    and one through a brace group; none for a parent using its child."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "src"
        (root / "pipe").mkdir(parents=True)
        (root / "lib.rs").write_text("mod pipe;\n")
        (root / "pipe" / "mod.rs").write_text("mod a;\nmod b;\nuse a::A;\n")
        (root / "pipe" / "a.rs").write_text("use super::{b::{B}};\npub struct A;\n")
        (root / "pipe" / "b.rs").write_text("// super::a::A in a comment is no edge\npub fn f() -> super::a::A { todo!() }\n")
        out = subprocess.run([sys.executable, __file__, str(root)], capture_output=True, text=True)
        assert out.returncode == 1 and "pipe::a -> pipe::b -> pipe::a" in out.stdout, out.stdout
        (root / "pipe" / "b.rs").write_text("pub struct B;\n")
        out = subprocess.run([sys.executable, __file__, str(root)], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout
        # A test file of its own (`#[cfg(test)] mod tests;`) counts as test code.
        (root / "pipe" / "b.rs").write_text("#[cfg(test)]\nmod tests;\npub struct B;\n")
        (root / "pipe" / "b").mkdir()
        (root / "pipe" / "b" / "tests.rs").write_text("use crate::pipe::a::A;\n")
        (root / "pipe" / "a.rs").write_text("use super::b::B;\npub struct A;\n")
        out = subprocess.run([sys.executable, __file__, str(root)], capture_output=True, text=True)
        assert out.returncode == 0 and "[tests only: pipe::a]" in out.stdout, out.stdout
    print("modcycles self-test: ok")


if sys.argv[1] == "--self-test":
    self_test()
    sys.exit(0)
src = Path(sys.argv[1])


def module_of(p: Path) -> str:
    rel = p.relative_to(src)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def strip(text: str) -> str:
    """Code without comments; string and char literals emptied."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif (m := re.compile(r'b?r(#*)"').match(text, i)) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.index('"' + m.group(1), m.end())
            out.append('""')
            i = end + 1 + len(m.group(1))
        elif c == '"':
            i += 1
            while text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append('""')
            i += 1
        elif c == "'" and (m := re.compile(r"'(\\.[^']*|[^\\'])'").match(text, i)):
            out.append("' '")
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def split_top(s: str):
    depth, cur, out = 0, "", []
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [x.strip() for x in out if x.strip()]


def split_tests(code: str):
    """(non-test code, code of `#[cfg(test)] mod ... { }` blocks)."""
    tests = ""
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*(pub(\(\w+\))?\s+)?mod\s+\w+\s*\{", code)
        if not m:
            return code, tests
        j, depth = m.end(), 1
        while depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        tests += code[m.start() : j]
        code = code[: m.start()] + code[j:]


def module_path(p: Path):
    """src/a/b.rs -> (a, b); src/a/mod.rs -> (a,); src/a.rs -> (a,)."""
    parts = list(p.relative_to(src).with_suffix("").parts)
    if parts[-1] == "mod":
        parts.pop()
    return tuple(parts)


def use_paths(code: str):
    """Every path a `use` statement names, brace groups expanded: `use a::{b, c::{d}}` gives
    a::b and a::c::d (`self` in a group names the group's own path)."""
    out = []

    def expand(prefix, tree):
        tree = tree.strip()
        m = re.match(r"((?:\w+\s*::\s*)*)\{(.*)\}$", tree, re.S)
        if m:
            head = [x for x in re.split(r"\s*::\s*", m.group(1).strip()) if x]
            for item in split_top(m.group(2)):
                expand(prefix + head, item)
            return
        segs = [x for x in re.split(r"\s*::\s*", re.sub(r"\s+as\s+\w+$", "", tree)) if x]
        if segs == ["self"]:
            out.append(prefix)
        elif segs and segs != ["*"]:
            out.append(prefix + [x for x in segs if x != "*"])
        else:
            out.append(prefix)

    for m in re.finditer(r"\buse\s+([^;]+);", code):
        expand([], m.group(1))
    return out


def inline_paths(code: str):
    """`crate::a::b`, `super::a`, `self::a` and `child::a` paths anywhere in the code."""
    return [m.group(0).replace(" ", "").split("::") for m in re.finditer(r"\b\w+(?:\s*::\s*\w+)+", code)]


def resolve(own, segs, modules):
    """The module a path names (its longest known prefix), from module `own`; None if it
    leaves the crate."""
    if not segs:
        return None
    if segs[0] == "crate":
        base, rest = (), segs[1:]
    elif segs[0] in ("super", "self"):
        base = own
        rest = list(segs)
        while rest and rest[0] in ("super", "self"):
            if rest.pop(0) == "super":
                base = base[:-1]
    elif own + (segs[0],) in modules:
        base, rest = own, segs
    else:
        return None
    best = base
    for i in range(1, len(rest) + 1):
        cand = base + tuple(rest[:i])
        if cand in modules:
            best = cand
        else:
            break
    return best or None


files = [p for p in src.rglob("*.rs") if p.name not in ("lib.rs", "main.rs")]
modules = {module_path(p) for p in files}
name = "::".join
edges = {name(m): set() for m in modules}
test_edges = {name(m): set() for m in modules}
# Files of modules declared `#[cfg(test)] mod name;` (and their descendants) are test code.
test_files = set()
for p in src.rglob("*.rs"):
    own = () if p.name in ("lib.rs", "main.rs") else module_path(p)
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\(\w+\))?\s+)?mod\s+(\w+)\s*;", strip(p.read_text())):
        test_files.add(own + (m.group(1),))
for p in files:
    own = module_path(p)
    code, tests = split_tests(strip(p.read_text()))
    if any(own[: len(t)] == t for t in test_files):
        code, tests = "", code + tests
    for part, graph in ((code, edges), (tests, test_edges)):
        for segs in use_paths(part) + inline_paths(part):
            t = resolve(own, segs, modules)
            # A module's own items and its descendants are not imports of another module.
            if t is None or t[: len(own)] == own:
                continue
            graph[name(own)].add(name(t))
for a in test_edges:
    test_edges[a] -= edges[a]
modules = set(edges)

def cycles(graph):
    """Every elementary cycle, each once, starting at its smallest module."""
    out = []
    order = sorted(graph)
    for start in order:
        allowed = {n for n in order if n >= start}
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph[node]):
                if nxt == start:
                    out.append(path + [start])
                elif nxt in allowed and nxt not in path:
                    stack.append((nxt, path + [nxt]))
    return sorted(out, key=lambda c: (len(c), c))


print("edges (non-test code):")
for a in sorted(edges):
    extra = f"   [tests only: {', '.join(sorted(test_edges[a]))}]" if test_edges[a] else ""
    print(f"  {a:24} -> {', '.join(sorted(edges[a])) or '-'}{extra}")

# The same graph with every folder as one node (crate-level layering).
top = {}
for a, bs in edges.items():
    top.setdefault(a.split("::")[0], set()).update(b.split("::")[0] for b in bs)
for a in top:
    top[a].discard(a)

cs = cycles(edges)
coarse = [c for c in cycles(top) if c not in cs]
print(f"\ncycles in non-test code: {len(cs)}")
for c in cs:
    print("  " + " -> ".join(c))
print(f"cycles between top-level modules (a folder as one node): {len(coarse)}")
for c in coarse:
    print("  " + " -> ".join(c))

both = {m: edges[m] | test_edges[m] for m in modules}
extra = [c for c in cycles(both) if c not in cs]
print(f"\nadditional cycles when #[cfg(test)] code counts: {len(extra)}")
for c in extra:
    print("  " + " -> ".join(c))

sys.exit(1 if cs or coarse else 0)
