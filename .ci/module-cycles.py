#!/usr/bin/env python3
"""No module cycles: the module graph of runtime, am, pgas, vys, rpc and vys-spead is acyclic.

For each crate, every non-test reference from one module to another
(`use crate::...`, `use super::...`, `crate::x::...` and `super::...` paths
in code) is an edge "module A uses module B". Comments (doc comments
included), string literals and `#[cfg(test)]` items (`mod tests { ... }`,
`mod models;`) are left out. A path is followed through the `use`
declarations of the module it names, so `crate::writing` (re-exported by
lib.rs) counts as a use of the module that defines `writing`.

Edges count between the top-level modules of a crate (`fabric::shm::ring`
using `config` is `fabric -> config`), and inside the modules listed in
EXPAND also between their submodules (`fabric::shm -> fabric::udp`); an
edge to a module's own parent or child is not counted. A strongly connected
component of more than one module is a cycle: every one is printed with the
lines that make its edges, and the exit status is 1.

    python3 .ci/module-cycles.py              # check the crates
    python3 .ci/module-cycles.py --self-test  # check the checker on fixtures
    python3 .ci/module-cycles.py --edges      # also list every edge

Standard library only.
"""

import os
import re
import sys
import tempfile

# (crate name, source directory, modules whose submodules are nodes too)
CRATES = [
    ("runtime", "runtime/src", ["fabric"]),
    ("am", "am/src", []),
    ("pgas", "pgas/src", []),
    ("vys", "vys/src", []),
    ("rpc", "rpc/src", []),
    ("vys-spead", "vys/spead/src", []),
]
# Modules left out.
IGNORE: set = set()

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# ---------------------------------------------------------------- lexing


def ident_start(src, i):
    """Whether an identifier could start at `i` (nothing of one before)."""
    return i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")


def blank(src):
    """The source with comments and the contents of string and char
    literals replaced by spaces (newlines kept, so offsets and line numbers
    stay those of the file)."""
    out = list(src)
    n = len(src)
    i = 0

    def wipe(a, b):
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = src[i]
        if c == "/" and src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif c == "/" and src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            wipe(i, j)
            i = j
        elif c == "r" and ident_start(src, i - 1 if src[i - 1 : i] == "b" else i):
            m = re.match(r'r(#*)"', src[i:])
            if m:
                end = '"' + m.group(1)
                j = src.find(end, i + len(m.group(0)))
                j = n if j < 0 else j + len(end)
                wipe(i + len(m.group(0)), j - len(end))
                i = j
            else:
                i += 1
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            wipe(i + 1, j)
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}'), not a lifetime ('a).
            if i + 1 < n and src[i + 1] == "\\":
                j = src.find("'", i + 3)
                j = n if j < 0 else j
                wipe(i + 1, j)
                i = j + 1
            elif i + 2 < n and src[i + 2] == "'":
                wipe(i + 1, i + 2)
                i += 3
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


def match_close(code, i):
    """The offset just past the bracket that closes the one at `i`."""
    pairs = {"{": "}", "(": ")", "[": "]"}
    stack = [pairs[code[i]]]
    j = i + 1
    while j < len(code) and stack:
        c = code[j]
        if c in pairs:
            stack.append(pairs[c])
        elif stack and c == stack[-1]:
            stack.pop()
        j += 1
    return j


def item_end(code, i):
    """The end of the item starting at `i`: past its first `;` or its
    first brace block at bracket depth 0."""
    j = i
    while j < len(code):
        c = code[j]
        if c in "([":
            j = match_close(code, j)
        elif c == "{":
            return match_close(code, j)
        elif c == ";":
            return j + 1
        else:
            j += 1
    return j


TEST_CFG = re.compile(r"#\[cfg\((\s*test\s*|\s*all\s*\((?:[^()]|\([^()]*\))*\)\s*)\)\]")


def strip_test_items(code):
    """`code` with `#[cfg(test)]` (and `#[cfg(all(test, ..))]`) items
    blanked; also the names of the modules so declared (`mod models;`)."""
    test_mods = set()
    out = list(code)
    pos = 0
    while True:
        m = TEST_CFG.search(code, pos)
        if not m:
            break
        pred = m.group(1)
        if pred.strip() != "test" and not re.search(r"(?<!not\()\btest\b", pred):
            pos = m.end()
            continue
        j = m.end()
        # Further attributes of the same item.
        while True:
            while j < len(code) and code[j].isspace():
                j += 1
            if code.startswith("#[", j):
                j = match_close(code, j + 1)
            else:
                break
        end = item_end(code, j)
        d = re.match(r"(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code[j:end])
        if d:
            test_mods.add(d.group(1))
        for k in range(m.start(), end):
            if out[k] != "\n":
                out[k] = " "
        pos = end
    return "".join(out), test_mods


# ---------------------------------------------------------------- use trees


def use_paths(text):
    """The paths of a use tree (the text between `use` and `;`): a list of
    (segments, name) where name is what the path is known as (its alias, or
    None for a glob)."""
    toks = re.findall(r"::|[{},*]|[A-Za-z_$][A-Za-z0-9_]*", text)
    pos = 0
    out = []

    def tree(prefix):
        nonlocal pos
        segs = list(prefix)
        while pos < len(toks):
            t = toks[pos]
            if t == "{":
                pos += 1
                while pos < len(toks) and toks[pos] != "}":
                    tree(segs)
                    if pos < len(toks) and toks[pos] == ",":
                        pos += 1
                pos += 1  # the "}"
                return
            if t == "*":
                pos += 1
                out.append((segs, None))
                return
            if t == "::":
                pos += 1
                continue
            if t in (",", "}"):
                break
            segs = segs + [t]
            pos += 1
            if pos < len(toks) and toks[pos] == "as":
                name = toks[pos + 1] if pos + 1 < len(toks) else t
                pos += 2
                out.append((segs, name))
                return
            if pos >= len(toks) or toks[pos] in (",", "}"):
                if t == "self":
                    segs = segs[:-1]
                    out.append((segs, segs[-1] if segs else None))
                else:
                    out.append((segs, t))
                return

    while pos < len(toks):
        before = pos
        tree([])
        if pos < len(toks) and toks[pos] == ",":
            pos += 1
        if pos == before:
            pos += 1
    return out


# ---------------------------------------------------------------- a crate


class Ref:
    """A reference from one module to a path, with where it is written."""

    def __init__(self, scope, segs, file, line, text):
        self.scope, self.segs = scope, segs
        self.file, self.line, self.text = file, line, text


class Crate:
    def __init__(self, root, src, ignore=()):
        self.root = root  # the repository (paths are printed relative to it)
        self.src = src
        self.ignore = {os.path.normpath(os.path.join(root, p)) for p in ignore}
        self.modules = {}  # module path (tuple) -> file
        self.imports = {}  # module path -> {name: absolute segments}
        self.globs = {}  # module path -> [absolute module segments]
        self.refs = []
        self._load((), os.path.join(root, src, "lib.rs"), True)

    def _ignored(self, path):
        p = os.path.normpath(path)
        return any(p == i or p.startswith(i + os.sep) or p == i + ".rs" for i in self.ignore)

    def _load(self, mod, path, is_dir_owner):
        if self._ignored(path):
            return
        with open(path, encoding="utf-8") as f:
            src = f.read()
        code, test_mods = strip_test_items(blank(src))
        # `pub(in path)` is a visibility, not a use.
        code = re.sub(r"pub\s*\(\s*in\s+[^)]*\)", lambda m: " " * len(m.group(0)), code)
        self.modules[mod] = path
        rel = os.path.relpath(path, self.root)
        lines = src.split("\n")

        def line_of(off):
            return code.count("\n", 0, off) + 1

        # Inline modules: (start, end, module path), innermost last.
        inline = []
        for m in re.finditer(r"(?<![\w$])mod\s+(\w+)\s*\{", code):
            start = m.end() - 1
            inline.append((start, match_close(code, start), m.group(1)))

        def scope_at(off):
            s = mod
            for a, b, name in inline:
                if a < off < b:
                    s = s + (name,)
            return s

        for a, b, name in inline:
            self.modules.setdefault(scope_at(a + 1), path)

        # File modules declared here.
        here = os.path.dirname(path)
        child_dir = here if is_dir_owner else os.path.join(here, os.path.splitext(os.path.basename(path))[0])
        for m in re.finditer(r"(?<![\w$])mod\s+(\w+)\s*;", code):
            name = m.group(1)
            if name in test_mods or scope_at(m.start()) != mod:
                continue
            f1 = os.path.join(child_dir, name + ".rs")
            f2 = os.path.join(child_dir, name, "mod.rs")
            if os.path.exists(f1):
                self._load(mod + (name,), f1, False)
            elif os.path.exists(f2):
                self._load(mod + (name,), f2, True)

        # Use declarations.
        use_spans = []
        for m in re.finditer(r"(?<![\w$])use\s+", code):
            end = code.find(";", m.end())
            if end < 0:
                continue
            use_spans.append((m.start(), end))
            scope = scope_at(m.start())
            first = line_of(m.start())
            last = line_of(end)
            text = " ".join(l.strip() for l in lines[first - 1 : last])
            for segs, name in use_paths(code[m.end() : end]):
                self.refs.append(Ref(scope, segs, rel, first, text))
                self.imports.setdefault(scope, {})
                self.globs.setdefault(scope, [])
                if name is None:
                    self.globs[scope].append(segs)
                elif name != "_":
                    self.imports[scope][name] = segs

        # Paths in code: crate::.., $crate::.., super::.., self::..
        for m in re.finditer(r"(?<![\w$])(?:\$crate|crate|super|self)(?:\s*::\s*(?:\w+|\*))+", code):
            if any(a <= m.start() < b for a, b in use_spans):
                continue
            segs = [s for s in re.split(r"\s*::\s*", m.group(0)) if s != "*"]
            ln = line_of(m.start())
            self.refs.append(Ref(scope_at(m.start()), segs, rel, ln, lines[ln - 1].strip()))

    # Resolution.

    def absolute(self, scope, segs):
        """`segs` as written in `scope`, from the crate root; None for a path
        outside the crate."""
        if not segs:
            return None
        head, rest = segs[0], segs[1:]
        if head in ("crate", "$crate"):
            return list(rest)
        if head in ("super", "self"):
            cur = list(scope)
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super":
                    if not cur:
                        return None
                    cur.pop()
                segs = segs[1:]
            return cur + list(segs)
        if scope + (head,) in self.modules:
            return list(scope) + list(segs)
        imp = self.imports.get(scope, {}).get(head)
        if imp is not None and imp[:1] != [head]:
            base = self.absolute(scope, imp)
            return None if base is None else base + list(rest)
        return None

    def resolve(self, path, depth=0):
        """The module that defines what the absolute `path` names."""
        cur = ()
        for i, seg in enumerate(path):
            if cur + (seg,) in self.modules:
                cur = cur + (seg,)
                continue
            if depth < 16:
                imp = self.imports.get(cur, {}).get(seg)
                if imp is not None:
                    target = self.absolute(cur, imp)
                    if target is not None:
                        return self.resolve(target + list(path[i + 1 :]), depth + 1)
            return cur
        return cur

    def edges(self, expand):
        """{(from node, to node): [Ref]}: top-level modules, and the
        submodules of the modules in `expand`."""
        out = {}
        for r in self.refs:
            path = self.absolute(r.scope, r.segs)
            if path is None:
                continue
            a, b = r.scope, self.resolve(path)
            if not a or not b:
                continue
            pairs = [(a[:1], b[:1])]
            if a[0] == b[0] and a[0] in expand and len(a) > 1 and len(b) > 1:
                pairs.append((a[:2], b[:2]))
            for x, y in pairs:
                if x != y:
                    out.setdefault(("::".join(x), "::".join(y)), []).append(r)
        return out


# ---------------------------------------------------------------- graphs


def sccs(nodes, succ):
    """Tarjan's strongly connected components."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(succ.get(v, ())):
            if w not in index:
                visit(w)
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
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def cycles_in(comp, succ, limit=100):
    """The elementary cycles of one component, each from its least node."""
    comp = sorted(comp)
    members = set(comp)
    out = []
    for s in comp:
        allowed = {v for v in members if v >= s}

        def walk(path):
            for w in sorted(succ.get(path[-1], ())):
                if len(out) >= limit:
                    return
                if w == s:
                    out.append(path + [s])
                elif w in allowed and w not in path:
                    walk(path + [w])

        walk([s])
    return out


def check(root, crates, ignore, show=print, list_edges=False):
    """Every crate's cycles: a list of (crate, component, cycles, edges)."""
    found = []
    for name, src, expand in crates:
        crate = Crate(root, src, ignore)
        edges = crate.edges(expand)
        if list_edges:
            for a, b in sorted(edges):
                show(f"{name}: {a} -> {b}  ({edges[(a, b)][0].file}:{edges[(a, b)][0].line})")
        succ = {}
        for a, b in edges:
            succ.setdefault(a, set()).add(b)
        nodes = {n for e in edges for n in e}
        bad = [c for c in sccs(nodes, succ) if len(c) > 1]
        nmods = len(crate.modules) - 1
        if not bad:
            show(f"{name}: {nmods} modules, {len(edges)} edges between them, no cycle")
            continue
        for comp in bad:
            cyc = cycles_in(comp, succ)
            found.append((name, comp, cyc, edges))
            show(f"{name}: CYCLE among {', '.join(comp)}")
            for c in cyc:
                show("  cycle: " + " -> ".join(c))
            for a in comp:
                for b in sorted(succ.get(a, ())):
                    if b in comp:
                        show(f"  {a} -> {b}:")
                        seen = set()
                        for r in edges[(a, b)]:
                            key = (r.file, r.line)
                            if key not in seen:
                                seen.add(key)
                                show(f"    {r.file}:{r.line}: {r.text}")
    return found


# ---------------------------------------------------------------- self-test

FIXTURE = {
    "lib.rs": """
        //! Docs mention `crate::d::Y` and `use crate::c;`: not code.
        mod a;
        mod b;
        mod c;
        mod d;
        mod net;
        #[cfg(test)]
        mod only_tests;
        pub use a::Thing;
        """,
    # a <-> b: through a use line, and through a root re-export.
    "a.rs": """
        use crate::b::X;
        pub struct Thing;
        pub fn g() {}
        """,
    "b.rs": """
        pub struct X;
        /// A doc comment: [`crate::d::Y`].
        pub fn f() -> crate::Thing { let _ = "crate::c::Z"; crate::Thing }
        """,
    # c -> d in code, d -> c only in tests, comments and strings: no cycle.
    "c.rs": """
        pub struct Z;
        pub fn h() { super::d::y() }
        """,
    "d.rs": """
        // use crate::c::Z;
        pub fn y() { let _c = '"'; let _q = '\\''; let _s = r#"crate::c::Z"#; let _b = br"\\"; }
        pub fn w() -> &'static str { "crate::c::Z" }
        pub struct Y<'a>(&'a u8);
        #[cfg(test)]
        mod tests {
            use crate::c::Z;
            #[test]
            fn t() { let _ = Z; }
        }
        """,
    # Declared under #[cfg(test)]: not part of the graph.
    "only_tests.rs": """
        use crate::c::Z;
        use crate::d::y;
        """,
    # net::x <-> net::y is a cycle inside `net`; net::y -> net (its
    # parent) and net -> net::x (its child) are not edges.
    "net/mod.rs": """
        pub mod x;
        pub mod y;
        pub use x::Frame;
        pub struct Shared;
        """,
    "net/x.rs": """
        pub struct Frame;
        pub fn go() { super::y::Other::new(); }
        """,
    "net/y.rs": """
        use super::Frame;
        use super::Shared;
        pub struct Other;
        impl Other { pub fn new() -> Self { Other } }
        mod inner {
            use super::Other;
            use super::super::x::Frame as F;
        }
        """,
}


def self_test():
    with tempfile.TemporaryDirectory() as tmp:

        def write(files):
            for rel, text in files.items():
                p = os.path.join(tmp, "src", rel)
                os.makedirs(os.path.dirname(p), exist_ok=True)
                with open(p, "w", encoding="utf-8") as f:
                    f.write("\n".join(l[8:] for l in text.split("\n")))

        write(FIXTURE)
        lines = []
        found = check(tmp, [("fixture", "src", ["net"])], set(), lines.append)
        comps = sorted(tuple(c) for _, c, _, _ in found)
        want = [("a", "b"), ("net::x", "net::y")]
        errors = []
        if comps != want:
            errors.append(f"components {comps}, expected {want}")
        text = "\n".join(lines)
        for needle in (
            "src/a.rs:2: use crate::b::X;",
            "src/b.rs:4: pub fn f() -> crate::Thing",
            "src/net/y.rs:2: use super::Frame;",
            "src/net/x.rs:3: pub fn go() { super::y::Other::new(); }",
            "src/net/y.rs:8: use super::super::x::Frame as F;",
            "cycle: a -> b -> a",
        ):
            if needle not in text:
                errors.append(f"output lacks {needle!r}")

        # Break both cycles (a type moves down; a path goes through the
        # parent's re-export of its own type): no cycle is left.
        write(
            {
                "b.rs": "pub struct X;\npub fn f() {}\n",
                "net/x.rs": "pub struct Frame;\npub fn go() {}\n",
            }
        )
        lines2 = []
        found2 = check(tmp, [("fixture", "src", ["net"])], set(), lines2.append)
        if found2:
            errors.append("cycles left after the fix: " + "\n".join(lines2))

        # Ignored directories are left out.
        write({"c.rs": "pub struct Z;\npub fn h() { crate::net::x::go(); }\n"})
        write({"net/x.rs": "pub struct Frame;\npub fn go() { crate::c::h() }\n"})
        found3 = check(tmp, [("fixture", "src", [])], set(), lambda s: None)
        found4 = check(tmp, [("fixture", "src", [])], {"src/net"}, lambda s: None)
        if sorted(tuple(c) for _, c, _, _ in found3) != [("c", "net")]:
            errors.append(f"c <-> net not found: {found3}")
        if found4:
            errors.append("src/net was not ignored")

    if errors:
        print("module-cycles self-test FAILED:\n  " + "\n  ".join(errors))
        print(text)
        return 1
    print("module-cycles self-test: ok (a cycle found through use lines, paths and re-exports; none through tests, comments or strings)")
    return 0


def main(argv):
    if "--self-test" in argv:
        return self_test()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = check(root, CRATES, IGNORE, list_edges="--edges" in argv)
    if found:
        print(f"module-cycles: {len(found)} cycle(s); break them (a shared type moves down a level, or a callback goes up as a trait)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
