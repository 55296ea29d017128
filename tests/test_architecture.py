"""The house of trivium's packages: imports run down the layers, never up, and no modules
import each other in a circle.

The files are read with ``ast`` (nothing is imported). Every import of ``trivium.*`` counts:
at module level, inside functions, and under ``if TYPE_CHECKING:`` (reported by kind). A
lower layer never imports a higher one: pass the higher thing in, or let it register itself
in a registry of the lower layer. Two packages of one layer may depend on each other in one
direction only. The order and what each layer does are written in DESIGN.md ("Packages").
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parent.parent / "trivium"

# Lowest first. A package may import every package of a lower layer. An entry is a package or,
# where one module of a package sits lower than the rest, that module ("config.schema").
LAYERS: tuple[tuple[str, ...], ...] = (
    ("trivium", "errors", "lazy", "registry"),  # the package's own name, errors, lazy imports, the registry
    ("core",),  # the data every component passes: tasks, experiences, batches, metric names
    ("algorithm", "envs"),  # pure tensor math; the rules of the games tasks come from
    ("config.schema", "config.modes"),  # the typed fields of the configuration and the traits of its modes
    ("data",),  # task datasets generated locally
    ("sync",),  # weight transports and the version protocol both sides speak
    ("models",),  # engines, the model wrapper, chat formats, the OpenAI-compatible server
    ("rewards",),  # reward functions (may read a model's formats or ask a reward model)
    ("workflows",),  # episodes: a model, a task and a reward
    ("buffer",),  # storages, readers, writers, pipelines
    ("config",),  # loading, resolve() and the checks against every registry
    ("trainer", "explorer"),  # the two sides of a run
    ("monitor",),  # what a run logs and reports
    ("interop", "tinker_client"),  # other systems' configs and checkpoints; a Tinker service
    ("runtime",),  # placement, sessions and the mode loops
    ("serve", "tinker_server", "debug", "studio"),  # applications built on a run
    ("cli",),
)

# (importing module, imported module) -> why this upward import stays. At most one.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}

# Circles that exist only through ``if TYPE_CHECKING:`` imports, as sorted module tuples. At most one.
ALLOWED_TYPE_ONLY_CIRCLES: dict[tuple[str, ...], str] = {
    ("trivium.models.openai_client", "trivium.models.wrapper", "trivium.models.wrapper_clients"): (
        "the client is built by the wrapper and annotates the wrapper it calls back"
    ),
}

LAYER_OF = {package: index for index, layer in enumerate(LAYERS) for package in layer}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    kind: str  # "module", "function" or "type"
    line: int

    def __str__(self) -> str:
        return f"{self.importer}:{self.line} -> {self.imported} ({self.kind})"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE_ROOT.rglob("*.py"))}


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def unit_of(module: str) -> str:
    """The entry of LAYERS ``module`` belongs to: its own module entry if it has one, else its package."""
    relative = module.partition(".")[2]
    for entry in sorted(LAYER_OF, key=len, reverse=True):
        if "." in entry and (relative == entry or relative.startswith(f"{entry}.")):
            return entry
    return package_of(module)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every ``trivium`` import in one file; ``from a import b`` names ``a.b`` when ``b`` is a module."""
    found: list[Import] = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def targets(node: ast.stmt) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            base = ".".join(anchor + ([node.module] if node.module else []))
        return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]

    def walk(nodes: list[ast.stmt], kind: str) -> None:
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in dict.fromkeys(targets(node)):
                    if target == "trivium" or target.startswith("trivium."):
                        found.append(Import(module, target, kind, node.lineno))
            elif isinstance(node, ast.If) and _is_type_checking(node.test):
                walk(node.body, "type")
                walk(node.orelse, kind)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                walk(node.body, "type" if kind == "type" else "function")
            else:
                for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                    children = getattr(node, field, None)
                    if isinstance(children, list):
                        walk([child for child in children if isinstance(child, ast.AST)], kind)

    walk(ast.parse(path.read_text(), str(path)).body, "module")
    return found


@pytest.fixture(scope="module")
def all_imports() -> list[Import]:
    modules = all_modules()
    return [found for module, path in modules.items() for found in imports_of(module, path, modules)]


def upward_imports(imports: list[Import]) -> list[Import]:
    return [
        found for found in imports if LAYER_OF[unit_of(found.importer)] < LAYER_OF[unit_of(found.imported)]
    ]


def two_way_pairs(imports: list[Import]) -> list[str]:
    """Packages of one layer that import each other both ways."""
    directions: dict[tuple[str, str], Import] = {}
    for found in imports:
        importer, imported = unit_of(found.importer), unit_of(found.imported)
        if importer != imported and LAYER_OF[importer] == LAYER_OF[imported]:
            directions.setdefault((importer, imported), found)
    return [
        f"{directions[(a, b)]} and {directions[(b, a)]}"
        for a, b in sorted(directions)
        if a < b and (b, a) in directions
    ]


def circles(imports: list[Import], kinds: set[str]) -> list[tuple[str, ...]]:
    """The module sets that import each other in a circle (Tarjan's strongly connected components)."""
    graph: dict[str, set[str]] = {}
    for found in imports:
        if found.kind in kinds and found.importer != found.imported:
            graph.setdefault(found.importer, set()).add(found.imported)
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[tuple[str, ...]] = []

    def visit(node: str) -> None:
        index[node] = lowlink[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                lowlink[node] = min(lowlink[node], lowlink[successor])
            elif successor in on_stack:
                lowlink[node] = min(lowlink[node], index[successor])
        if lowlink[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(tuple(sorted(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def test_every_package_has_a_layer():
    modules = all_modules()
    packages = {package_of(module) for module in modules}
    entries = {unit_of(module) for module in modules}
    assert packages - set(LAYER_OF) == set(), "add the new package to LAYERS (and to DESIGN.md's packages)"
    assert set(LAYER_OF) - entries == set(), "LAYERS names a package or module that no longer exists"
    assert unit_of("trivium.config.schema") == "config.schema" and unit_of("trivium.config.load") == "config"


def test_the_import_reader_sees_every_kind_of_import(tmp_path):
    source = (
        "from typing import TYPE_CHECKING\n"
        "import trivium.core.task\n"
        "from trivium.core import experience\n"
        "from .batch import ExperienceBatch\n"
        "if TYPE_CHECKING:\n"
        "    from trivium.models.wrapper import ModelWrapper\n"
        "def build():\n"
        "    from trivium.errors import UserError\n"
    )
    file = tmp_path / "probe.py"
    file.write_text(source)
    modules = {"trivium.core.experience": file, "trivium.core.batch": file}
    found = [(i.imported, i.kind) for i in imports_of("trivium.core.probe", file, modules)]
    assert found == [
        ("trivium.core.task", "module"),
        ("trivium.core.experience", "module"),
        ("trivium.core.batch", "module"),
        ("trivium.models.wrapper", "type"),
        ("trivium.errors", "function"),
    ]


def test_no_import_runs_up_a_layer(all_imports):
    upward = upward_imports(all_imports)
    assert len(ALLOWED_UPWARD) <= 1
    unexpected = [str(found) for found in upward if (found.importer, found.imported) not in ALLOWED_UPWARD]
    assert not unexpected, f"{len(unexpected)} imports run up a layer:\n" + "\n".join(unexpected)


def test_packages_of_one_layer_depend_one_way(all_imports):
    both_ways = two_way_pairs(all_imports)
    assert not both_ways, "packages of one layer import each other both ways:\n" + "\n".join(both_ways)


def test_no_modules_import_each_other_in_a_circle(all_imports):
    found = circles(all_imports, {"module"})
    assert not found, f"{len(found)} import circles at module level:\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def test_no_circle_closes_through_an_import_inside_a_function(all_imports):
    """A function-level import hides a circle from Python but not from a reader: none either."""
    found = circles(all_imports, {"module", "function"})
    assert not found, f"{len(found)} import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_circles_through_type_only_imports_are_the_allowed_one(all_imports):
    assert len(ALLOWED_TYPE_ONLY_CIRCLES) <= 1
    runtime_circles = circles(all_imports, {"module", "function"})
    type_only = [c for c in circles(all_imports, {"module", "function", "type"}) if c not in runtime_circles]
    unexpected = [c for c in type_only if c not in ALLOWED_TYPE_ONLY_CIRCLES]
    assert not unexpected, "circles through TYPE_CHECKING imports:\n" + "\n".join(
        " <-> ".join(c) for c in unexpected
    )


def test_the_circle_finder_finds_a_circle_and_only_it():
    imports = [
        Import("trivium.a.x", "trivium.a.y", "module", 1),
        Import("trivium.a.y", "trivium.a.z", "module", 1),
        Import("trivium.a.z", "trivium.a.x", "module", 1),
        Import("trivium.a.z", "trivium.a.w", "module", 1),
        Import("trivium.a.w", "trivium.a.z", "function", 1),
    ]
    assert circles(imports, {"module"}) == [("trivium.a.x", "trivium.a.y", "trivium.a.z")]
