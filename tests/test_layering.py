"""The layering the design states, enforced over the source (``DESIGN.md`` "Layers"; issue 13 §6).

Each module may import only modules of its own layer or of the layers above it (a lower rank):

| rank | layer | packages |
| --- | --- | --- |
| 1 | contract | ``memory_core``'s top-level modules (model, engine base, errors, limits, settings, scoring, timing) |
| 2 | beliefs | ``memory_core.beliefs`` (pure distillation over the contract's items) |
| 3 | engines | ``memory_core.engines``, ``memory_core.facts``, the package root's re-exports |
| 4 | lifecycle | ``memory_core.lifecycle``, ``memory_core.recall``, ``memory_core.documents`` |
| 5 | workers | ``workers``, ``beat_schedule`` |
| 6 | surfaces | ``memory_core.cli``, ``.conformance``, ``.eval``, ``.replay``, ``.examples``, ``bench`` |

Beliefs rank above the engines because an engine that builds beliefs itself calls the distiller inside its
``consolidate`` (the design says so under "Beliefs"). Besides the ranks: only ``workers``, ``beat_schedule`` and
the CLI's worker commands import ``celery`` or ``kombu``; nothing below the surfaces imports ``workers``; and the
modules of ``workers`` import each other without a cycle (imports inside functions count; imports under
``if TYPE_CHECKING:`` do not, since they never run).

A package this table does not name yet is left unchecked by the ranks (a new package adds its row here), but the
Celery and ``workers`` rules hold for every module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RANKS: dict[str, int] = {
    "memory_core.beliefs": 2,
    "memory_core.engines": 3,
    "memory_core.facts": 3,  # pure fact rules (engines rank with them) and FactStore over the engine contract
    "memory_core": 3,  # the package root re-exports the contract and the engine registry
    "memory_core.lifecycle": 4,
    "memory_core.recall": 4,
    "memory_core.documents": 4,
    "workers": 5,
    "beat_schedule": 5,
    "memory_core.cli": 6,
    "memory_core.conformance": 6,  # a test kit over engines, run by the CLI and the tests
    "memory_core.eval": 6,
    "memory_core.replay": 6,
    "memory_core.examples": 6,
    "memory_core.__main__": 6,
    "bench": 6,
}
CELERY_IMPORTERS = frozenset(
    {"memory_core.cli._celery", "memory_core.cli.worker", "memory_core.cli.beat", "memory_core.cli.flower"}
)
"""The CLI's worker commands: the only modules outside ``workers`` that may import Celery or kombu."""
SOURCES = ("memory_core", "workers", "bench", "beat_schedule.py")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> Iterator[tuple[str, Path]]:
    for source in SOURCES:
        base = ROOT / source
        for path in sorted([base] if base.is_file() else base.rglob("*.py")):
            yield module_name(path), path


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(path: Path, package: str) -> set[str]:
    """Every module ``path`` imports when it runs (top level and inside functions; not ``TYPE_CHECKING`` ones)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against the module's package
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)  # ``from pkg import module``
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def rank(module: str) -> int | None:
    """The module's layer rank: its longest prefix in ``RANKS``, else 1 for a top-level ``memory_core`` module."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in RANKS and not (prefix == "memory_core" and n < len(parts)):
            return RANKS[prefix]
    if parts[0] == "memory_core" and len(parts) == 2 and not (ROOT / "memory_core" / parts[1]).is_dir():
        return 1
    return None


def known(module: str) -> bool:
    return module.split(".")[0] in {"memory_core", "workers", "bench", "beat_schedule"}


def test_each_layer_imports_only_its_own_and_the_layers_above_it() -> None:
    broken = []
    for module, path in modules():
        mine = rank(module)
        if mine is None:
            continue
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for target in imports(path, package):
            theirs = rank(target) if known(target) else None
            if theirs is not None and theirs > mine:
                broken.append(f"{module} (layer {mine}) imports {target} (layer {theirs})")
    assert not broken, "\n".join(sorted(set(broken)))


def test_only_workers_and_the_clis_worker_commands_import_celery_or_kombu() -> None:
    broken = []
    for module, path in modules():
        if module.split(".")[0] in {"workers", "beat_schedule"} or module in CELERY_IMPORTERS:
            continue
        used = {t for t in imports(path, module) if t.split(".")[0] in {"celery", "kombu", "billiard"}}
        broken += [f"{module} imports {t}" for t in sorted(used)]
    assert not broken, "\n".join(broken)


def test_nothing_below_the_surfaces_imports_workers() -> None:
    broken = []
    for module, path in modules():
        mine = rank(module)
        if mine is None or mine >= 5:
            continue
        broken += [f"{module} imports {t}" for t in sorted(imports(path, module)) if t.split(".")[0] == "workers"]
    assert not broken, "\n".join(broken)


def test_the_modules_of_workers_import_each_other_without_a_cycle() -> None:
    graph: dict[str, set[str]] = {}
    for module, path in modules():
        if module.split(".")[0] == "workers":
            package = module if path.name == "__init__.py" else module.rpartition(".")[0]
            graph[module] = imports(path, package)
    graph = {m: {t for t in targets if t in graph and t not in {m, "workers"}} for m, targets in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def cycle_from(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state:
                found = cycle_from(target)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = cycle_from(node)
            assert found is None, " -> ".join(found)
    assert len(graph) > 10  # the test saw the package


def test_the_rules_catch_what_they_forbid(tmp_path: Path) -> None:
    """The checks above see imports at any depth, relative ones, and skip only ``TYPE_CHECKING`` blocks."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "import celery\n"
        "def f():\n    from workers.queue import JobQueue\n"
        "if TYPE_CHECKING:\n    from kombu import Connection\n"
        "from .. import engines\n"
    )
    found = imports(probe, "memory_core.lifecycle")
    assert {"celery", "workers.queue", "memory_core.engines"} <= found and "kombu" not in found
    assert rank("memory_core.lifecycle.jobs") == 4 and rank("memory_core.errors") == 1
    assert rank("memory_core.engines.sqlite.engine") == 3 and rank("workers.kinds") == 5
