"""No import circle in ``cost_envs``, ``agents`` or ``experiments``: read from the source.

The imports are read with :mod:`ast` (nothing is imported) and sorted into two kinds:

* **module-level**: run when the module is imported (at the top, in a class body, under
  ``try``/``if``);
* **function-level**: inside a ``def`` or ``lambda``, run when the function is called.

Imports under ``if TYPE_CHECKING:`` never run and are left out. ``importlib`` calls with a
string (the lazy public face of :mod:`agents`) are not imports the source states and are
not read. Importing ``a.b.c`` also runs the packages ``a`` and ``a.b``; those implicit
parent imports are not edges (else every package re-exporting its submodules would be a
circle), but ``from a.b import name`` in ``a.b.c`` is an explicit edge to ``a.b``.

What fails, decided in issue #25:

1. a circle of module-level imports: the defect proper, a module that works or breaks
   depending on which of the circle is imported first;
2. a circle closed by a function-level import: the same knot, hidden. Two modules that
   need each other are one concept split in two; the fix is to move the shared piece into
   the lower module, not to tuck the import into a function. Function-level imports that
   close no circle (torch, an optional extra, a heavy module imported when used) are fine.

Each failure names the circle as a path (``a -> b -> a``), marking function-level edges.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("cost_envs", "agents", "experiments")
#: Edge kinds.
MODULE, FUNCTION = "module", "function"

Graph = dict[str, dict[str, str]]  # module -> {imported module: kind}


def module_files(root: Path, packages: Iterable[str]) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (its file, whether it is a package's ``__init__``)."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


#: The nodes that hold statements, where imports can be (the rest are expressions).
STATEMENTS = (ast.stmt, ast.excepthandler, ast.match_case)


def _imports(tree: ast.AST) -> Iterable[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement that can run, with whether it sits inside a function."""

    def visit(node: ast.AST, in_function: bool):
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, STATEMENTS):
                continue  # an expression holds no import statement: not walked (issue #36)
            if isinstance(child, ast.If) and _is_type_checking(child):
                # its body never runs; an ``else`` does
                yield from visit(ast.Module(body=child.orelse, type_ignores=[]), in_function)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                      ast.Lambda))
            yield from visit(child, inner)

    yield from visit(tree, False)


def import_graph(root: Path = REPO, packages: Iterable[str] = PACKAGES) -> Graph:
    """The project's imports between its own modules, each edge ``module`` or ``function``.

    An edge imported both ways counts as module-level (it runs at import either way).
    """
    modules = module_files(root, packages)

    def resolve(name: str) -> str | None:
        while name and name not in modules:  # ``import a.b.c`` of a name in a.b.c: a.b.c
            name = name.rpartition(".")[0]
        return name or None

    graph: Graph = {}
    for name, (path, is_package) in modules.items():
        edges = graph.setdefault(name, {})
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, in_function in _imports(tree):
            if isinstance(node, ast.Import):
                targets = [resolve(alias.name) for alias in node.names]
            else:
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                # ``from pkg import mod`` imports the module pkg.mod, else names of pkg
                targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules
                           else resolve(source) for alias in node.names]
            for target in targets:
                if target is None or target == name:
                    continue
                kind = FUNCTION if in_function else MODULE
                if edges.get(target) != MODULE:
                    edges[target] = kind
    return graph


def _components(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _circle(graph: Graph, component: list[str]) -> list[str]:
    """One circle through the component's first module: the shortest, as a path."""
    members, start = set(component), component[0]
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for child in sorted(graph[node]):
            if child == start:
                return [*paths[node], start]
            if child in members and child not in paths:
                paths[child] = [*paths[node], child]
                queue.append(child)
    raise AssertionError(f"no circle through {start} in {component}")  # not a component


def circles(graph: Graph, kinds: tuple[str, ...] = (MODULE, FUNCTION)) -> list[str]:
    """Each circle of the graph restricted to edges of ``kinds``, as ``a -> b -> a``.

    A function-level edge is marked ``-(in a function)->``.
    """
    kept = {name: {target: kind for target, kind in edges.items() if kind in kinds}
            for name, edges in graph.items()}
    shown = []
    for component in _components({name: set(edges) for name, edges in kept.items()}):
        path = _circle(kept, component)
        text = path[0]
        for here, there in itertools.pairwise(path):
            arrow = " -(in a function)-> " if kept[here][there] == FUNCTION else " -> "
            text += arrow + there
        shown.append(text)
    return shown


@pytest.fixture(scope="module")
def graph() -> Graph:
    return import_graph()


def test_the_graph_holds_every_module_and_known_edges(graph) -> None:
    # the reader sees the three packages and both kinds of import
    assert {"cost_envs", "agents.cli.main", "experiments.corl.runner"} <= set(graph)
    assert graph["agents.cli.evaluate"]["agents.evaluation"] == MODULE
    assert graph["agents.cli.main"]["cost_envs"] == FUNCTION  # --help imports no cost_envs
    assert graph["agents.cli.train"]["agents.learners.training"] == FUNCTION  # torch, when run
    # from pkg import mod
    assert graph["experiments.corl.runner"]["experiments.tune.corl"] == MODULE


def test_no_circle_of_module_level_imports(graph) -> None:
    found = circles(graph, (MODULE,))
    assert not found, "import circles (module-level):\n" + "\n".join(found)


def test_no_circle_closed_by_a_function_level_import(graph) -> None:
    found = circles(graph)
    assert not found, ("import circles closed inside functions (move the shared piece to "
                       "the lower module):\n" + "\n".join(found))


def _experiments(graph: Graph) -> Graph:
    """The graph of the ``experiments`` modules alone, with their edges among themselves."""
    return {name: {target: kind for target, kind in edges.items()
                   if target.split(".")[0] == "experiments"}
            for name, edges in graph.items() if name.split(".")[0] == "experiments"}


def test_no_circle_among_the_experiments_packages_modules(graph) -> None:
    # issue #36: one package per paper or study; a runner, its report and its settings
    # import downwards (runner -> report -> settings), and across packages only one way
    within = _experiments(graph)
    packages = {name.split(".")[1] for name in within if name.count(".") >= 1}
    assert {"lora_ppo", "corl", "bopo", "traces", "rules", "tune", "shared"} <= packages
    assert within["experiments.corl.runner"]["experiments.corl.report"] == MODULE
    found = circles(within)
    assert not found, "import circles among the experiments:\n" + "\n".join(found)


def test_the_experiments_packages_import_nothing_when_imported(graph) -> None:
    # The graph leaves out the implicit import of a module's parent packages, so a package
    # whose __init__ imported its modules could close a circle unseen (and importing a
    # package's settings would run its runner, torch and all): every __init__ is its
    # docstring only (and the top one sets ATEN_CPU_CAPABILITY before torch).
    inits = [name for name, (_, is_package) in module_files(REPO, ("experiments",)).items()
             if is_package]
    assert len(inits) > 10
    assert {name: sorted(graph[name]) for name in inits if graph[name]} == {}


def test_the_shared_plumbing_imports_no_experiment(graph) -> None:
    for name, edges in _experiments(graph).items():
        if name.startswith("experiments.shared"):
            assert all(target.startswith("experiments.shared") for target in edges), name


def _package(tmp_path: Path, files: Mapping[str, str]) -> Graph:
    for name, text in {"pkg/__init__.py": "", **files}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    return import_graph(tmp_path, ("pkg",))


def test_a_planted_module_level_circle_is_named(tmp_path) -> None:
    graph = _package(tmp_path, {"pkg/a.py": "from pkg.b import x\n",
                                "pkg/b.py": "import pkg.c\nx = 1\n",
                                "pkg/c.py": "from pkg import a\n"})
    assert circles(graph, (MODULE,)) == ["pkg.a -> pkg.b -> pkg.c -> pkg.a"]


def test_a_circle_hidden_in_a_function_is_named_and_type_checking_is_not(tmp_path) -> None:
    graph = _package(tmp_path, {
        "pkg/a.py": "from .b import x\n",
        "pkg/b.py": "x = 1\ndef f():\n    from pkg.a import y\n",
        "pkg/c.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    from pkg.d import z\nelse:\n    z = 0\n"),
        "pkg/d.py": "from pkg.c import z\n",
    })
    assert circles(graph, (MODULE,)) == []
    assert circles(graph) == ["pkg.a -> pkg.b -(in a function)-> pkg.a"]
