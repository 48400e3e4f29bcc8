"""What a patch's Python code defines and uses, read with ``ast``.

Used by ``make pr`` for two questions:

* dependencies: patch B needs an earlier patch A when code B adds or changes
  imports a module A adds, or loads a module-level name A defines (a new
  function / class / constant of that module, or a function whose signature A
  changes), or calls a method A adds whose name vLLM does not have anywhere;
* dead code: a PR must not carry a new name or module that only a later PR
  uses.

Only code counts: prose, comments, docstrings and string literals are not
names, and a ``def`` nested in a function is local to it (never a module-level
definition). Names are resolved through the file's imports: ``foo`` in
``vllm/a.py`` is ``vllm.a.foo`` unless ``a.py`` imports ``foo`` from
elsewhere, ``m.foo`` is ``<module bound to m>.foo``.

Pure functions of file texts; git access lives in ``pr.py``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field

Ref = tuple[str, str]  # (module, name)
Site = tuple[str, int]  # (path, line)


def module_of(rel: str) -> str | None:
    """``vllm/a/b.py`` -> ``vllm.a.b``; ``vllm/a/__init__.py`` -> ``vllm.a``."""
    if not rel.endswith((".py", ".pyi")):
        return None
    parts = rel.rsplit(".", 1)[0].split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_of(rel: str) -> str:
    mod = module_of(rel) or ""
    return mod if rel.endswith("__init__.py") else mod.rpartition(".")[0]


def _resolve_relative(rel: str, level: int, module: str | None) -> str:
    if level == 0:
        return module or ""
    pkg = _package_of(rel).split(".") if _package_of(rel) else []
    if level > 1:
        pkg = pkg[: len(pkg) - (level - 1)]
    return ".".join([*pkg, *([module] if module else [])])


@dataclass(frozen=True)
class Definition:
    name: str
    kind: str  # "function" | "class" | "constant"
    signature: str  # ast.dump of a function's arguments; "" otherwise
    start: int
    end: int
    decorated: bool
    methods: frozenset[str] = frozenset()


def _top_level_statements(body: Iterable[ast.stmt]) -> Iterable[ast.stmt]:
    """Module-level statements, looking into ``if`` / ``try`` / ``with``
    blocks (``if TYPE_CHECKING:``, ``try: import ...``) but never into a
    function or class body."""
    for stmt in body:
        if isinstance(stmt, ast.If):
            yield from _top_level_statements(stmt.body)
            yield from _top_level_statements(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            for block in (stmt.body, stmt.orelse, stmt.finalbody):
                yield from _top_level_statements(block)
            for handler in stmt.handlers:
                yield from _top_level_statements(handler.body)
        elif isinstance(stmt, ast.With):
            yield from _top_level_statements(stmt.body)
        else:
            yield stmt


def _target_names(target: ast.expr) -> Iterable[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            yield from _target_names(elt)


def definitions(tree: ast.Module) -> dict[str, Definition]:
    """Module-level names a module defines (functions, classes, constants)."""
    out: dict[str, Definition] = {}
    for stmt in _top_level_statements(tree.body):
        end = getattr(stmt, "end_lineno", None) or stmt.lineno
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([stmt.lineno, *(d.lineno for d in stmt.decorator_list)])
            out[stmt.name] = Definition(
                stmt.name,
                "function",
                ast.dump(stmt.args, annotate_fields=False),
                start,
                end,
                bool(stmt.decorator_list),
            )
        elif isinstance(stmt, ast.ClassDef):
            start = min([stmt.lineno, *(d.lineno for d in stmt.decorator_list)])
            methods = frozenset(
                s.name for s in stmt.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
            )
            out[stmt.name] = Definition(
                stmt.name, "class", "", start, end, bool(stmt.decorator_list), methods
            )
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                for name in _target_names(target):
                    if name not in out:
                        out[name] = Definition(name, "constant", "", stmt.lineno, end, False)
    return out


def has_main_guard(tree: ast.Module) -> bool:
    for stmt in tree.body:
        if (
            isinstance(stmt, ast.If)
            and isinstance(stmt.test, ast.Compare)
            and isinstance(stmt.test.left, ast.Name)
            and stmt.test.left.id == "__name__"
        ):
            return True
    return False


def exported_names(tree: ast.Module) -> set[str]:
    """Names listed in ``__all__``."""
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets
        ):
            if isinstance(stmt.value, (ast.List, ast.Tuple)):
                return {
                    e.value
                    for e in stmt.value.elts
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)
                }
    return set()


@dataclass
class Uses:
    """What the added / changed lines of one file import and load."""

    imports: dict[str, set[Site]] = field(default_factory=dict)  # module -> sites
    refs: dict[Ref, set[Site]] = field(default_factory=dict)  # (module, name) -> sites
    attrs: dict[str, set[Site]] = field(default_factory=dict)  # attribute name -> sites

    def merge(self, other: Uses) -> None:
        for mine, theirs in (
            (self.imports, other.imports),
            (self.refs, other.refs),
            (self.attrs, other.attrs),
        ):
            for key, sites in theirs.items():
                mine.setdefault(key, set()).update(sites)  # type: ignore[attr-defined]


def _bindings(tree: ast.Module, rel: str) -> dict[str, tuple[str, str | None]]:
    """Name -> (module, name-or-None) for every import in the file (local
    imports included: vLLM imports lazily inside functions)."""
    out: dict[str, tuple[str, str | None]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    out[alias.asname] = (alias.name, None)
                else:
                    head = alias.name.split(".")[0]
                    out[head] = (head, None)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_relative(rel, node.level, node.module)
            for alias in node.names:
                if alias.name != "*":
                    out[alias.asname or alias.name] = (base, alias.name)
    return out


def _dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def uses(rel: str, text: str, lines: set[int] | None) -> Uses:
    """Imports and loads on ``lines`` of ``rel`` (every line when None)."""
    out = Uses()
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return out
    module = module_of(rel) or rel
    binds = _bindings(tree, rel)

    def on(node: ast.AST) -> bool:
        if lines is None:
            return True
        start = getattr(node, "lineno", 0)
        end = getattr(node, "end_lineno", start) or start
        # An import statement spans lines; any changed line of it counts.
        return any(n in lines for n in range(start, end + 1))

    def add(table: dict, key: object, node: ast.AST) -> None:
        table.setdefault(key, set()).add((rel, getattr(node, "lineno", 0)))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if on(alias) if hasattr(alias, "lineno") else on(node):
                    add(out.imports, alias.name, node)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_relative(rel, node.level, node.module)
            for alias in node.names:
                if not (on(alias) if hasattr(alias, "lineno") else on(node)):
                    continue
                add(out.imports, base, node)
                if alias.name != "*":
                    add(out.imports, f"{base}.{alias.name}", node)
                    add(out.refs, (base, alias.name), node)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and on(node):
            bound = binds.get(node.id)
            if bound is None:
                add(out.refs, (module, node.id), node)
            elif bound[1] is not None:
                add(out.refs, (bound[0], bound[1]), node)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and on(node):
            add(out.attrs, node.attr, node)
            chain = _dotted(node)
            if chain and chain[0] in binds:
                mod, name = binds[chain[0]]
                prefix = f"{mod}.{name}" if name else mod
                # import a.b.c binds ``a``: a.b.c.f is (a.b.c, f)
                add(out.refs, (".".join([prefix, *chain[1:-1]]), chain[-1]), node)
    return out


@dataclass
class FileChange:
    """One Python file as a patch leaves it."""

    path: str
    before: str | None  # None: the patch adds the file
    after: str
    added: set[int]  # line numbers of ``after`` the patch adds or changes


@dataclass
class Facts:
    """What one patch defines and uses."""

    modules: set[str] = field(default_factory=set)  # modules it adds
    entry_modules: set[str] = field(default_factory=set)  # of those: scripts / tests
    defines: dict[Ref, tuple[str, Definition]] = field(default_factory=dict)  # -> (path, def)
    changed_signatures: set[Ref] = field(default_factory=set)
    methods: dict[str, str] = field(default_factory=dict)  # new method name -> path
    exempt: set[Ref] = field(default_factory=set)  # not subject to the dead-code check
    uses: Uses = field(default_factory=Uses)


def facts(changes: Iterable[FileChange]) -> Facts:
    out = Facts()
    for ch in changes:
        mod = module_of(ch.path)
        if mod is None:
            continue
        out.uses.merge(uses(ch.path, ch.after, None if ch.before is None else ch.added))
        try:
            after = ast.parse(ch.after)
        except SyntaxError:
            continue
        before_defs: dict[str, Definition] = {}
        if ch.before is not None:
            try:
                before_defs = definitions(ast.parse(ch.before))
            except SyntaxError:
                before_defs = {}
        else:
            out.modules.add(mod)
            if ch.path.startswith("tests/") or "/tests/" in ch.path or has_main_guard(after):
                out.entry_modules.add(mod)
        is_test = ch.path.startswith("tests/") or "/tests/" in ch.path
        public = exported_names(after)
        for name, d in definitions(after).items():
            old = before_defs.get(name)
            if old is None:
                out.defines[(mod, name)] = (ch.path, d)
                if (
                    is_test
                    or name.startswith("__")
                    or name in public
                    or (d.decorated and d.kind != "constant")
                    or name.startswith("test_")
                ):
                    out.exempt.add((mod, name))
            elif d.kind == "function" and old.kind == "function" and d.signature != old.signature:
                out.changed_signatures.add((mod, name))
            elif d.kind == "class" and old.kind == "class":
                for m in d.methods - old.methods:
                    if not m.startswith("__"):
                        out.methods[m] = ch.path
    return out


def needs(later: Facts, earlier: Facts, new_method_names: set[str]) -> list[str]:
    """Why ``later`` needs ``earlier`` (empty: it does not)."""
    why: list[str] = []
    for mod in sorted(earlier.modules):
        if mod in later.uses.imports:
            why.append(f"imports {mod}")
    for ref in sorted(set(earlier.defines) | earlier.changed_signatures):
        if ref in later.uses.refs:
            why.append(f"uses {ref[0]}.{ref[1]}")
    for name in sorted(set(earlier.methods) & new_method_names):
        if name in later.uses.attrs:
            why.append(f"calls .{name}()")
    return why


def users_of(ref: Ref, definition: Definition, path: str, all_facts: list[Facts]) -> list[int]:
    """Indices of the patches whose added code uses ``ref`` (outside its own
    definition)."""
    hits: list[int] = []
    for i, f in enumerate(all_facts):
        sites = f.uses.refs.get(ref, set())
        if any(not (p == path and definition.start <= ln <= definition.end) for p, ln in sites):
            hits.append(i)
    return hits


def importers_of(module: str, all_facts: list[Facts]) -> list[int]:
    return [i for i, f in enumerate(all_facts) if module in f.uses.imports]
