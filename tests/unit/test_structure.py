"""The shape of kvtasks/: no module over 300 lines (the in-target code aside), no import cycle, and a
report that imports nothing from the harness. Read from the source with `ast`; nothing is imported.

The import graph has one node per module (a package is its `__init__`). An import is an edge to the
module it names: `from kvtasks.a import b` goes to `kvtasks.a.b` when that is a module, else to
`kvtasks.a`; a relative import is resolved against the importing module's package. That Python runs
a package's `__init__` before any module inside it adds no edge (grimp and import-linter read it the
same way), so a package may import its own modules as long as they do not import it back.

Every import counts, wherever it is written, one inside a function included: deferring an import
hides a cycle from the interpreter, not from the maintainer, who still cannot change one side
without the other (the fleet's engine and join were such a pair). Only an
import under `if TYPE_CHECKING:` is left out: it never runs, and names a type for an annotation,
not behaviour the module depends on.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: its kvtasks/ is read, whatever is installed
MAX_LINES = 300
# The in-target code, exempt from the line limit: it runs inside the target, stdlib only, loaded
# under a per-run name. Paths from the checkout's root; one ending in "/" is a folder, everything
# under it exempt.
IN_TARGET = ("kvtasks/harness/in_target/",)
# what the report's code may not reach, through any chain of imports: what launches targets
LAUNCHERS = ("kvtasks.harness", "kvtasks.stages", "kvtasks.pipeline")


def modules_under(root: Path) -> dict[str, Path]:
    """Every module of the kvtasks package in the checkout at `root`, by its dotted name."""
    modules = {}
    for path in sorted((root / "kvtasks").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(name: str, modules: dict[str, Path]) -> set[str]:
    """Every module `name` imports, kvtasks' or not, resolved as the module docstring says."""
    path = modules[name]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    stack: list[ast.AST] = [ast.parse(path.read_text(), str(path))]
    while stack:
        node = stack.pop()
        if _type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            origin = ".".join([*base, *([node.module] if node.module else [])])
            found.update(f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in modules else origin
                         for alias in node.names)
        stack.extend(ast.iter_child_nodes(node))
    return found


def _reached(imported: str, modules: dict[str, Path]) -> str | None:
    """The kvtasks module an import reaches: itself, or the nearest package above a name that is none;
    None for a module outside kvtasks."""
    while imported and imported not in modules:
        imported = imported.rpartition(".")[0]
    return imported or None


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each kvtasks module -> the kvtasks modules it imports."""
    return {name: {target for imported in imports_of(name, modules)
                   if (target := _reached(imported, modules)) not in (None, name)} for name in modules}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's algorithm,
    iterative): every module of one imports every other, directly or through the rest."""
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = lowest[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            successor = next(successors, None)
            if successor is not None:
                if successor not in index:
                    index[successor] = lowest[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                elif successor in on_stack:
                    lowest[node] = min(lowest[node], index[successor])
                continue
            work.pop()
            if work:
                lowest[work[-1][0]] = min(lowest[work[-1][0]], lowest[node])
            if lowest[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def _described(component: frozenset[str], graph: dict[str, set[str]]) -> str:
    edges = "; ".join(f"{name} -> {', '.join(sorted(graph[name] & component))}" for name in sorted(component))
    return f"{{{', '.join(sorted(component))}}}: {edges}"


def test_no_module_is_over_300_lines_but_the_in_target_code():
    exempt = [ROOT / entry for entry in IN_TARGET]
    too_long = {str(path.relative_to(ROOT)): count for path in modules_under(ROOT).values()
                if not any(path == place or path.is_relative_to(place) for place in exempt)
                and (count := len(path.read_text().splitlines())) > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines (split them along their seams): {too_long}"


def test_the_in_target_exemption_names_only_in_target_code_that_exists():
    # an exemption for a path that is gone would exempt whatever takes its name next
    stale = [entry for entry in IN_TARGET if not (ROOT / entry).exists()]
    assert not stale, f"IN_TARGET names paths that are gone: {stale}"


def test_kvtasks_has_no_import_cycle():
    graph = import_graph(modules_under(ROOT))
    found = [_described(component, graph) for component in cycles(graph)]
    assert not found, "import cycles (move what both sides need into a module of its own):\n" + "\n".join(found)


def reachable(start: list[str], graph: dict[str, set[str]]) -> dict[str, str]:
    """Every module the `start` modules import, directly or through others -> the module importing it."""
    found: dict[str, str] = {}
    stack = list(start)
    while stack:
        name = stack.pop()
        for imported in sorted(graph[name]):
            if imported not in found and imported not in start:
                found[imported] = name
                stack.append(imported)
    return found


def test_the_report_reaches_nothing_that_launches_targets():
    # the code that regenerates a report must depend on nothing that launches targets, through any chain
    modules = modules_under(ROOT)
    report = [name for name in modules if name == "kvtasks.report" or name.startswith("kvtasks.report.")]
    assert report, "no kvtasks.report module or package"
    reached = reachable(report, import_graph(modules))
    launching = {name: by for name, by in reached.items() if name.startswith(LAUNCHERS)}
    assert not launching, f"the report reaches code that launches targets (module <- imported by): {launching}"


# -- the reader itself, on small graphs and a small package --------------------------------------

def test_cycles_are_the_components_that_import_each_other():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"f"}, "f": set(), "g": {"g"}}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]
    assert cycles({"x": {"y"}, "y": {"x", "z"}, "z": {"y"}, "w": {"x"}}) == [frozenset({"x", "y", "z"})]


def test_imports_count_inside_functions_and_relative_but_not_for_type_checking(tmp_path):
    package = tmp_path / "kvtasks"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "__init__.py").write_text("from . import leaf\nfrom .leaf import VALUE\n")
    (package / "inner" / "leaf.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kvtasks.other import Hint\n"
        "VALUE = 1\n\n\ndef late():\n    from .. import other\n    return other\n")
    (package / "other.py").write_text("import json\nfrom kvtasks import inner\nimport kvtasks.inner.gone\n")
    (package / "typed.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                      "    from kvtasks import other\nelse:\n    from kvtasks.inner import leaf\n")
    graph = import_graph(modules_under(tmp_path))
    assert graph == {"kvtasks": set(), "kvtasks.inner": {"kvtasks.inner.leaf"},
                     "kvtasks.inner.leaf": {"kvtasks.other"},  # the function's import counts
                     "kvtasks.other": {"kvtasks.inner"},  # a module that is not there reaches its package
                     "kvtasks.typed": {"kvtasks.inner.leaf"}}  # the else branch runs; TYPE_CHECKING's never does
    assert cycles(graph) == [frozenset({"kvtasks.inner", "kvtasks.inner.leaf", "kvtasks.other"})]


def test_what_a_module_reaches_is_every_chain_of_its_imports():
    graph = {"r": {"r.m"}, "r.m": {"x"}, "x": {"y"}, "y": set(), "z": {"r"}}
    assert reachable(["r", "r.m"], graph) == {"x": "r.m", "y": "x"}
