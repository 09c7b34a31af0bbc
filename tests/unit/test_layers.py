"""What docs/architecture.md claims about the layers, checked from the source.

import-linter (``make lint``) checks who imports whom. What it cannot see is checked here
by reading the code: which repository writes each table, that repositories never own a
transaction, that a face does not reach a repository through a name a flow re-exports,
and that no two classes of the package share a name.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "runbell"
FACES = ("api", "web", "mcp", "cli", "dispatch", "hooks", "demo", "testing")
WRITES = ("insert", "update", "delete")

#: The tables more than one module writes, and why. Every other table has exactly one
#: writer; a new writer of any table fails the test until it is justified here.
SHARED_WRITERS: dict[str, dict[str, str]] = {
    "tenants": {
        "runbell.store.accounts": "the tenant row itself",
        "runbell.store.db": "the feed counter, bumped by the unit of work as events flush",
        "runbell.store.feed": "the feed's pruned-through mark",
        "runbell.store.retention": "the tenant's retention override",
    },
    "feed_events": {
        "runbell.store.db": "the unit of work appends a transaction's events just before commit",
        "runbell.store.feed": "pruning by age, which also moves the tenant's pruned-through mark",
    },
}
#: Retention purges expired rows of many tables by age: deleting is its one job.
PURGER = "runbell.store.retention"


def modules(under: str = "") -> Iterator[tuple[str, ast.Module]]:
    root = PACKAGE / under if under else PACKAGE
    for path in sorted(root.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        yield name.removesuffix(".__init__"), ast.parse(path.read_text(), str(path))


def _table(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """``t.name`` / ``tables.name`` / a name bound to one of those, else None."""
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in ("t", "tables")
    ):
        return node.attr
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    return None


def written_tables(tree: ast.Module) -> set[tuple[str, str]]:
    """(table, verb) pairs a module writes: ``sa.insert(t.x)``, ``fast.update(t.x)``,
    ``insert(x)`` with ``x = t.x``, ``t.x.delete()``, and literal SQL text."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            found = _table(node.value, {})
            if isinstance(target, ast.Name) and found:
                aliases[target.id] = found
    out: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            verb = next((w for w in WRITES if name == w or name.endswith(f"_{w}")), None)
            if verb and node.args and (found := _table(node.args[0], aliases)):
                out.add((found, verb))
            if (
                isinstance(f, ast.Attribute)
                and f.attr in WRITES
                and (found := _table(f.value, aliases))
            ):
                out.add((found, f.attr))
            if name == "text" and node.args and isinstance(node.args[0], ast.Constant):
                sql = str(node.args[0].value)
                for m in re.finditer(r"\b(INSERT INTO|UPDATE|DELETE FROM)\s+(\w+)", sql, re.I):
                    out.add((m.group(2), m.group(1).split()[0].lower()))
    return out


def writers() -> dict[str, dict[str, set[str]]]:
    """table -> module -> verbs."""
    found: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for name, tree in modules():
        for table, verb in written_tables(tree):
            found[table][name].add(verb)
    return found


def test_every_table_has_one_repository_that_writes_it() -> None:
    wrong = []
    for table, by_module in sorted(writers().items()):
        mods = {m for m, verbs in by_module.items() if not (m == PURGER and verbs == {"delete"})}
        outside = sorted(m for m in mods if not m.startswith("runbell.store."))
        if outside:
            wrong.append(f"{table}: written outside the store by {outside}")
        allowed = SHARED_WRITERS.get(table)
        if allowed is not None:
            if mods - set(allowed):
                wrong.append(f"{table}: new writers {sorted(mods - set(allowed))}")
        elif len(mods) > 1:
            wrong.append(f"{table}: written by {sorted(mods)}; one repository should own it")
    assert not wrong, "\n".join(wrong)


def test_the_check_finds_the_writes_it_claims_to() -> None:
    """The analysis is not vacuous: it sees known writes of each shape it handles."""
    found = writers()
    assert "insert" in found["kv"]["runbell.store.kv"]  # t.kv.insert()
    assert "update" in found["runs"]["runbell.store.runs"]  # sa.update(t.runs)
    assert "delete" in found["presence"]["runbell.store.presence"]  # delete(_p), _p = t.x
    assert "insert" in found["feed_events"]["runbell.store.db"]  # fast.insert(t.feed_events)
    assert len(found) >= 30


TX_CALLS = {"commit", "rollback", "begin", "begin_nested", "transaction", "connect"}
#: The unit of work and the schema migrations own transactions; repositories never do.
TX_OWNERS = {"runbell.store.db", "runbell.store.migrate"}
#: What else may call one of TX_CALLS, and why: the fast seam begins a transaction exactly
#: where conn.execute's autobegin would (a read's first statement), and never ends one.
TX_ALLOWED = {"runbell.store.fast": {"begin"}}


def test_repositories_never_commit() -> None:
    wrong = []
    for name, tree in modules("store"):
        if name in TX_OWNERS:
            continue
        for node in ast.walk(tree):
            is_call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            call = node.func.attr if is_call else None  # type: ignore[attr-defined]
            if call in TX_CALLS and call not in TX_ALLOWED.get(name, set()):
                wrong.append(f"{name}:{node.lineno} calls .{node.func.attr}()")
    assert not wrong, "\n".join(wrong)


def _bound_from(tree: ast.Module, prefixes: tuple[str, ...]) -> set[str]:
    """Names a module binds by importing from one of ``prefixes`` (at any depth)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith(prefixes):
                names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(prefixes):
                    names.add(a.asname or a.name.split(".")[0])
    return names


def test_faces_reach_no_repository_through_a_flow() -> None:
    """A face importing a repository that a flow module imported (``from runbell.flows.x
    import notes``, or ``x.notes.get``) is a face reaching the store."""
    inner = ("runbell.store", "runbell.runtime")
    leaked = {name: _bound_from(tree, inner) for name, tree in modules("flows")}
    wrong = []
    for face in FACES:
        for name, tree in modules(face) if (PACKAGE / face).is_dir() else []:
            local: dict[str, str] = {}  # local name -> flows module
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module == "runbell.flows":
                    for a in node.names:
                        local[a.asname or a.name] = f"runbell.flows.{a.name}"
                elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "runbell.flows."
                ):
                    for a in node.names:
                        if a.name in leaked.get(node.module or "", set()):
                            wrong.append(f"{name}:{node.lineno} imports {a.name} via {node.module}")
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                    flow = local.get(node.value.id)
                    if flow and node.attr in leaked.get(flow, set()):
                        wrong.append(f"{name}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert not wrong, "\n".join(wrong)


def test_no_two_classes_share_a_name() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for name, tree in modules():
        if name.startswith("runbell.client"):
            continue  # the SDK's sync and async clients mirror each other by design
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                where[node.name].append(name)
    twice = {cls: mods for cls, mods in where.items() if len(mods) > 1}
    assert not twice, twice


def _pyproject_layers() -> list[set[str]]:
    import tomllib

    doc = tomllib.loads((PACKAGE.parents[1] / "pyproject.toml").read_text())
    contract = next(c for c in doc["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    return [
        {m.strip().removeprefix("runbell.") for m in layer.split("|")}
        for layer in contract["layers"]
    ]


def _documented_layers() -> list[set[str]]:
    text = (PACKAGE.parents[1] / "docs" / "architecture.md").read_text()
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]  # no header
    return [set(re.findall(r"`([a-z_][a-z0-9_]*)`", row.split("|")[2])) for row in rows]


def test_the_documented_layers_are_the_checked_ones() -> None:
    """docs/architecture.md's table of layers says what import-linter enforces."""
    assert _documented_layers() == _pyproject_layers()


#: A mapping of anything: what a typed record, view or input replaces.
UNTYPED = re.compile(r"\b(?:dict|Mapping|MutableMapping)\[str, (?:Any|object)\]")


def untyped_in_flow_signatures() -> list[str]:
    """Every flow function whose parameters or result are a mapping of anything."""
    found = []
    for name, tree in modules("flows"):
        for f in ast.walk(tree):
            if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef):
                args = [*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs]
                annotations = [a.annotation for a in args if a.annotation] + [f.returns]
                if any(UNTYPED.search(ast.unparse(a)) for a in annotations if a):
                    found.append(f"{name}.{f.name}")
    return found


def test_no_untyped_mapping_crosses_a_flow_signature() -> None:
    """Rows cross the store boundary as records (``domain.records``), views leave flows as
    TypedDicts, faces hand flows typed bodies (``flows.inputs``): no flow takes or returns
    a mapping of anything. (JSON a caller owns — details, metadata, evidence — stays a
    dict inside those records, kept as given.)"""
    assert untyped_in_flow_signatures() == [], "take and return records or TypedDicts"


def test_the_untyped_check_finds_what_it_claims_to() -> None:
    assert UNTYPED.search("dict[str, Any] | None")
    assert UNTYPED.search("list[Mapping[str, object]]")
    assert not UNTYPED.search("dict[str, int]")
