#!/usr/bin/env python3
"""Module dependency graph of one crate's src/ and its import cycles.

An edge a -> b means a file of module `a` names `crate::b` (in a `use crate::...` statement,
nested braces included, or inline as `crate::b::...`). Comments (//, //!, ///, /* */) and
string literals are stripped first, so doc links do not count. A directory module (config/)
is one node. Edges found only inside `#[cfg(test)]` modules are reported separately.

usage: modcycles.py <crate>/src   (exit 1 when non-test code has a cycle; scripts/test.sh runs it)
"""

import re
import sys
from pathlib import Path

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


def refs(code: str):
    found = set()
    # `use crate::{a, b::{c, d}, e as f};`
    for m in re.finditer(r"\buse\s+crate::\{", code):
        i, depth = m.end(), 1
        j = i
        while depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        for item in split_top(code[i : j - 1]):
            found.add(re.match(r"\w+", item).group(0))
    # `crate::a::...`, `use crate::a;`, `crate::a` in any expression or type
    for m in re.finditer(r"\bcrate::(\w+)", code):
        found.add(m.group(1))
    return found


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


files = [p for p in src.rglob("*.rs") if p.name not in ("lib.rs", "main.rs")]
modules = {module_of(p) for p in files}
edges, test_edges = {m: set() for m in modules}, {m: set() for m in modules}
for p in files:
    a = module_of(p)
    code, tests = split_tests(strip(p.read_text()))
    for b in refs(code):
        if b in modules and b != a:
            edges[a].add(b)
    for b in refs(tests):
        if b in modules and b != a and b not in edges[a]:
            test_edges[a].add(b)


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
    print(f"  {a:12} -> {', '.join(sorted(edges[a])) or '-'}{extra}")

cs = cycles(edges)
print(f"\ncycles in non-test code: {len(cs)}")
for c in cs:
    print("  " + " -> ".join(c))

both = {m: edges[m] | test_edges[m] for m in modules}
extra = [c for c in cycles(both) if c not in cs]
print(f"\nadditional cycles when #[cfg(test)] code counts: {len(extra)}")
for c in extra:
    print("  " + " -> ".join(c))

sys.exit(1 if cs else 0)
