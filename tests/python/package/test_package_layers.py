"""The Python package's layout and imports (docs/architecture.md, "The Python package"), read from
its source with the ast module: folders show the features, imports go one way.

- at most 12 modules directly in python/autocastgen; each subpackage's __init__ declares its public
  names in a sorted __all__ that it binds; a private module is named once (no prefix families);
  no submodule shadows a name its package binds (``import autocastgen.advise`` once replaced the
  function ``autocastgen.advise`` with a module);
- the layer order (the block in docs/architecture.md): a module imports its own feature and features
  of lower layers, never the package root, never its own modules inside a function (except the
  generated ones, GENERATED); no import cycle among the modules, package __init__s (which importing
  a submodule runs) included;
- every third-party package imported is a declared dependency (pyproject.toml) or an optional one
  imported at its one boundary (OPTIONAL), inside a ``try`` that turns ImportError into what to
  install; the modules the tests import without torch (TORCH_FREE) import none of it;
- with a build: the build's copy of the package is the source's (python/CMakeLists.txt), with no
  module the source lacks; every module imports; every documented path (``autocastgen.X.Y`` and
  ``python -m autocastgen.X`` in docs/ and README.md) still resolves; a missing onnx is an
  ImportError saying what to install; with no yaml (pyproject.toml declares torch alone), every
  module imports and the advisor reads its base policy's ``autocast:`` through ``extends:`` chains
  (from the runtime's reader) as it read them with PyYAML.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tomllib
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SOURCE = ROOT / "python" / "autocastgen"
BUILD = Path(os.environ.get("AUTOCASTGEN_BUILD_DIR", ROOT / "build"))
PACKAGE = "autocastgen"

# The layers, read from docs/architecture.md ("The Python package", the block after the marker):
# feature (a subpackage, or a module directly in the package) -> its layer. A feature imports its own
# modules and features of lower layers only.
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MARKER = "<!-- python layers -->"


def read_layers(text: str) -> dict[str, int]:
    block = text.split(MARKER, 1)[1].split("```", 2)[1]
    layers = {}
    for line in block.splitlines()[2:]:  # the fence's rest and the header
        match = re.match(r"\s*(\d+)\s+(\S+(?: \S+)*)\s{2,}\S", line)
        assert match, f"docs/architecture.md, python layers: cannot read {line!r}"
        for feature in match.group(2).split():
            layers[feature] = int(match.group(1))
    return layers


LAYERS = read_layers(ARCHITECTURE.read_text(encoding="utf-8"))
# Written by the build, imported inside functions where they may be missing (python/CMakeLists.txt,
# cmake/AutocastgenInstall.cmake).
GENERATED = {"autocastgen._build_info", "autocastgen._build_tree", "autocastgen._C"}
# pyproject.toml's dependencies, as the names they are imported by.
IMPORTED_AS = {"torch": {"torch"}}
# Optional third-party packages: the one module that imports each (None: nothing may), inside a
# `try` whose ImportError handler says what to install. numpy comes with onnx (torch does not bring it).
ONNX_BOUNDARY = "autocastgen.deploy._onnx.packages"
# The training frameworks: autocastgen.integrations' modules, each imported only by the user.
FRAMEWORKS_BOUNDARY = "autocastgen.integrations._packages"
OPTIONAL = {"onnx": ONNX_BOUNDARY, "onnxscript": ONNX_BOUNDARY, "onnxruntime": ONNX_BOUNDARY,
            "numpy": ONNX_BOUNDARY, "transformers": FRAMEWORKS_BOUNDARY, "lightning": FRAMEWORKS_BOUNDARY,
            "accelerate": FRAMEWORKS_BOUNDARY, "tensorboard": None}
# Imported by tests in a fresh interpreter without torch (tests/python/child_process.py run_bounded):
# their module-level imports, followed through the package, must not reach torch.
TORCH_FREE = ["autocastgen._core.atomic", "autocastgen._core.terminal", "autocastgen.reporter"]
# A public package's modules are private and start with "_", except these documented ones
# (docs/report.md names reporter/reading.py, view.py and html.py; docs/training.md one module per
# training framework, which importing the package must not import).
PUBLIC_SUBMODULES = {"autocastgen.reporter.html", "autocastgen.reporter.reading", "autocastgen.reporter.view",
                     "autocastgen.integrations.lightning", "autocastgen.integrations.transformers"}
# Modules that import an optional package when imported: where it is missing, an ImportError saying
# what to install is what importing them must give.
NEEDS_EXTRA = {"autocastgen.integrations.lightning": "autocastgen[lightning]",
               "autocastgen.integrations.transformers": "autocastgen[transformers]"}
MAX_TOP_MODULES = 12


@dataclass
class Import:
    line: int
    target: str            # a module of the package, or a third-party top-level name
    own: bool              # a module of this package
    in_function: bool
    guarded: bool = False  # inside a try whose handler catches ImportError


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module
    imports: list[Import] = field(default_factory=list)

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]

    @property
    def feature(self) -> str:
        parts = self.name.split(".")
        return "__init__" if len(parts) == 1 else parts[1]


def _module_name(path: Path, source: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(source.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    names = [handler.type] if not isinstance(handler.type, ast.Tuple) else list(handler.type.elts)
    return any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError") for n in names)


def read_package(source: Path = SOURCE) -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for path in sorted(source.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        name, is_package = _module_name(path, source)
        modules[name] = Module(name, path, is_package, ast.parse(path.read_text(encoding="utf-8"), str(path)))
    known = set(modules) | GENERATED
    for module in modules.values():
        _find_imports(module, known)
    return modules


def _find_imports(module: Module, known: set[str]) -> None:
    def visit(node: ast.AST, in_function: bool, guarded: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            in_function = True
        if isinstance(node, ast.Try):
            catches = any(_catches_import_error(h) for h in node.handlers)
            for child in node.body:
                visit(child, in_function, guarded or catches)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, in_function, guarded)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno, in_function, guarded)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.package.split(".")
                base = base[:len(base) - (node.level - 1)]
                stem = ".".join([*base, node.module] if node.module else base)
            else:
                stem = node.module or ""
            if stem.split(".")[0] != PACKAGE:
                if stem != "__future__":
                    add(stem, node.lineno, in_function, guarded)
            else:
                for alias in node.names:
                    candidate = f"{stem}.{alias.name}"
                    module.imports.append(Import(node.lineno, candidate if candidate in known else stem, True,
                                                 in_function, guarded))
            return
        for child in ast.iter_child_nodes(node):
            visit(child, in_function, guarded)

    def add(name: str, line: int, in_function: bool, guarded: bool) -> None:
        if name.split(".")[0] == PACKAGE:
            # `import a.b.c` imports the longest prefix that is a module of ours.
            parts = name.split(".")
            while ".".join(parts) not in known and len(parts) > 1:
                parts.pop()
            module.imports.append(Import(line, ".".join(parts), True, in_function, guarded))
        else:
            module.imports.append(Import(line, name.split(".")[0], False, in_function, guarded))

    visit(module.tree, False, False)


def _shown(path: Path) -> str:
    """A path as the messages give it: from the repository's root where it is inside it."""
    return str(path.relative_to(ROOT)) if ROOT in path.parents else str(path)


def _feature_of(name: str) -> str:
    parts = name.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts))]  # not the root: Python imports it first


def module_graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    """What importing each module runs first: its module-level imports of ours, and the __init__ of
    every package on the way to each (those it is not inside already)."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for module in modules.values():
        inside = {module.name, *_ancestors(module.name)} | ({module.package} if module.is_package else set())
        for imp in module.imports:
            if not imp.own or imp.in_function or imp.target not in modules:
                continue
            graph[module.name] |= {step for step in _ancestors(imp.target) if step not in inside}
            if imp.target != module.name:
                graph[module.name].add(imp.target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), and self-loops."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def declared_dependencies() -> set[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        requirements = tomllib.load(f)["project"]["dependencies"]
    names = set()
    for requirement in requirements:
        distribution = re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()
        assert distribution in IMPORTED_AS, f"pyproject.toml depends on {distribution}: add what it is imported as"
        names |= IMPORTED_AS[distribution]
    return names


def problems(modules: dict[str, Module], layers: dict[str, int] | None = None) -> list[str]:
    """Every way the package breaks the rules in this file's doc, one line each; ``layers``: the
    features' layers (docs/architecture.md's, LAYERS, by default)."""
    found: list[str] = []
    rank = LAYERS if layers is None else layers
    order = " < ".join(" ".join(f for f in rank if rank[f] == n) for n in sorted(set(rank.values())))
    declared = declared_dependencies()
    for module in modules.values():
        where = _shown(module.path)
        if module.feature not in rank:
            found.append(f"{where}: feature '{module.feature}' is not in LAYERS (docs/architecture.md)")
            continue
        for imp in module.imports:
            at = f"{where}:{imp.line}"
            if imp.own:
                if imp.target == PACKAGE:
                    found.append(f"{at}: imports the package root (import what it needs from its own module)")
                    continue
                if imp.in_function and imp.target not in GENERATED:
                    found.append(f"{at}: imports {imp.target} inside a function (import it at the top)")
                if imp.target in GENERATED:
                    continue
                target = _feature_of(imp.target)
                if target not in rank:
                    found.append(f"{at}: imports {imp.target}, which is not a module of the package")
                elif target != module.feature and rank[target] >= rank[module.feature]:
                    where_to = "a layer above it" if rank[target] > rank[module.feature] else "of its own layer"
                    found.append(f"{at}: {module.feature} imports {imp.target}, {where_to} ({order})")
            elif imp.target in OPTIONAL:
                boundary = OPTIONAL[imp.target]
                if module.name != boundary:
                    found.append(f"{at}: imports the optional {imp.target} outside its boundary "
                                 f"({boundary or 'none: the package must not import it'})")
                elif not imp.guarded:
                    found.append(f"{at}: imports the optional {imp.target} outside a try that says what to install")
            elif imp.target not in declared and imp.target not in sys.stdlib_module_names:
                found.append(f"{at}: imports {imp.target}, which pyproject.toml does not declare")
    features = {module.feature for module in modules.values()}
    for feature in sorted(set(rank) - features):
        found.append(f"docs/architecture.md's python layers list {feature}, which the package does not have")
    for cycle in cycles(module_graph(modules)):
        found.append(f"an import cycle: {' <-> '.join(cycle)}")
    found += _layout_problems(modules)
    found += _torch_free_problems(modules)
    return list(dict.fromkeys(found))


def _bound_names(tree: ast.Module) -> set[str]:
    """Names a module binds at its top level (not the modules it imports by `from . import x`)."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def _all_of(module: Module) -> list[str] | None:
    for node in module.tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                return list(ast.literal_eval(node.value))
    return None


def _layout_problems(modules: dict[str, Module]) -> list[str]:
    found = []
    top = [m for m in modules.values() if m.name.count(".") == 1 and not m.is_package]
    if len(top) + 1 > MAX_TOP_MODULES:  # + __init__.py
        found.append(f"{len(top) + 1} modules directly in python/autocastgen (at most {MAX_TOP_MODULES}): "
                     f"{', '.join(sorted(m.name for m in top))}")
    for package in (m for m in modules.values() if m.is_package):
        where = _shown(package.path)
        children = sorted(n.rpartition(".")[2] for n in modules if n.rpartition(".")[0] == package.name
                          and n != package.name)
        private_folder = any(part.startswith("_") for part in package.name.split(".")[1:])
        exported = _all_of(package)
        if not private_folder or package.name == PACKAGE:
            if exported is None:
                found.append(f"{where}: declares no __all__ (a package's public names)")
            else:
                if exported != sorted(exported):
                    found.append(f"{where}: __all__ is not sorted")
                unbound = [n for n in exported if n not in _bound_names(package.tree) and n not in children]
                if unbound:
                    found.append(f"{where}: __all__ names what it does not bind: {', '.join(unbound)}")
        bound = _bound_names(package.tree)
        for child in children:
            full = f"{package.name}.{child}"
            if child in bound:
                found.append(f"{where}: the submodule {child} shadows the name {package.name}.{child} "
                             "(importing it replaces that name with the module)")
            if child.startswith("__"):
                continue
            if private_folder and child.startswith("_"):
                found.append(f"{full}: named private twice (its folder is private already)")
            if not private_folder and package.name != PACKAGE and not child.startswith("_") \
                    and full not in PUBLIC_SUBMODULES and not (full in modules and modules[full].is_package):
                found.append(f"{full}: a public package's module; name it _{child} (its __init__ declares "
                             "the public names), or list it in PUBLIC_SUBMODULES")
        families: dict[str, list[str]] = {}
        for child in children:
            match = re.match(r"_([a-z0-9]+)_", child)
            if match and not child.startswith("__"):
                families.setdefault(match.group(1), []).append(child)
        for prefix, members in families.items():
            if len(members) > 1:
                found.append(f"{where}: a prefix family _{prefix}_*: {', '.join(members)} (make it a folder)")
    return found


def _torch_free_problems(modules: dict[str, Module]) -> list[str]:
    """For each TORCH_FREE module, the shortest chain of module-level imports that reaches torch."""
    found = []
    for start in TORCH_FREE:
        todo = deque([*_ancestors(start), start])
        path = {name: [name] for name in todo}
        reached = None
        while todo and reached is None:
            name = todo.popleft()
            if name not in modules:
                continue
            module = modules[name]
            for imp in module.imports:
                if imp.in_function:
                    continue
                if not imp.own and imp.target == "torch":
                    reached = f"{' -> '.join(path[name])} imports torch ({_shown(module.path)}:{imp.line})"
                    break
                if imp.own:
                    for step in [*_ancestors(imp.target), imp.target]:
                        if step not in path:
                            path[step] = [*path[name], step]
                            todo.append(step)
        if reached is not None:
            found.append(f"{start} must import without torch (tests import it in processes without it), but {reached}")
    return found


# --- the rules, on the source -----------------------------------------------------------------


def test_the_package_keeps_its_layers():
    found = problems(read_package())
    assert not found, "\n".join(found)


def test_each_rule_catches_what_it_is_for(tmp_path):
    """The checks on a copy of the package with one bad import added at a time: each is reported."""
    import shutil

    copy = tmp_path / "autocastgen"
    shutil.copytree(SOURCE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    clean = problems(read_package(copy))
    assert not clean, "\n".join(clean)
    cases = {
        "_core/terminal.py": ("from .atomic import write_file\n", "an import cycle"),
        "_core/runtime.py": ("from ..policy import load_policy\n", "a layer above it"),
        "policy/__init__.py": ("from .. import advise\n", "imports the package root"),
        "state.py": ("def later():\n    from . import places\n", "inside a function"),
        "places.py": ("import requests\n", "pyproject.toml does not declare"),
        "advisor/_record.py": ("import yaml\n", "pyproject.toml does not declare"),
        "insight/__init__.py": ("import onnx\n", "outside its boundary"),
        "grad_scaler.py": ("def board():\n    import tensorboard\n", "outside its boundary"),
        "reporter/view.py": ("import torch\n", "must import without torch"),
    }
    for file, (line, wanted) in cases.items():
        target = copy / file
        before = target.read_text()
        target.write_text(before + line)
        try:
            found = problems(read_package(copy))
        finally:
            target.write_text(before)
        assert any(wanted in problem for problem in found), (file, line, found)
    (copy / "advise.py").write_text("")  # the bug this started from: a module named as a function
    assert any("shadows the name autocastgen.advise" in p for p in problems(read_package(copy)))


# A small package that keeps every rule (SMALL_LAYERS), and, for each rule, an edit that breaks it
# alone and a near miss that keeps it: what each rule reports, and that it reports nothing more.
SMALL_LAYERS = {"_core": 0, "low": 1, "side": 1, "high": 2, "deploy": 2, "__init__": 3}
SMALL = {
    "__init__.py": 'from .high import run\n\n__all__ = ["run"]\n',
    "_core/__init__.py": "",
    "_core/atomic.py": "import os\n",  # a TORCH_FREE module
    "low.py": "import json\n\nimport torch\n\nfrom ._core import atomic\n\n\ndef thing():\n    pass\n",
    "side.py": "from ._core.atomic import os\n",
    "high/__init__.py": 'from ._run import run\n\n__all__ = ["run"]\n',
    "high/_run.py": "from ..low import thing\nfrom ._helper import help\n\n\ndef run():\n    pass\n",
    "high/_helper.py": "def help():\n    pass\n",
    "deploy/__init__.py": "__all__ = []\n",
    "deploy/_onnx/__init__.py": "",
    "deploy/_onnx/packages.py": 'try:\n    import onnx\nexcept ImportError:\n    raise ImportError("pip install onnx")\n',
}
_TOP = {f"top{i}.py": "" for i in range(9)}  # with __init__, low and side: 12 modules directly in the package
# rule -> (files written over SMALL (None: removed), layers changed, the one problem reported (a
# regex), files of the near miss, its layers changed): the near miss reports nothing.
RULE_CASES: dict[str, tuple[dict[str, str | None], dict[str, int], str, dict[str, str | None], dict[str, int]]] = {
    "a feature without a layer": ({"extra.py": ""}, {}, r".*/extra\.py: feature 'extra' is not in LAYERS \(docs/architecture\.md\)",
                                  {"extra.py": ""}, {"extra": 1}),
    "the package root imported": ({"side.py": "import autocastgen\n"}, {},
                                  r".*/side\.py:1: imports the package root \(import what it needs from its own module\)",
                                  {"side.py": "from autocastgen._core import atomic\n"}, {}),
    "an import inside a function": ({"high/_run.py": SMALL["high/_run.py"] + "\n\ndef later():\n    from .. import low\n"},
                                    {}, r".*/_run\.py:10: imports autocastgen\.low inside a function \(import it at the top\)",
                                    {"high/_run.py": SMALL["high/_run.py"]
                                     + "\n\ndef later():\n    from .._build_info import VERSION\n    import json\n"}, {}),
    "a module the package lacks": ({"side.py": "from autocastgen.nowhere import x\n"}, {},
                                   r".*/side\.py:1: imports autocastgen\.nowhere, which is not a module of the package",
                                   {"side.py": "from autocastgen._core.atomic import os\n"}, {}),
    "a layer above": ({"side.py": "from .high import run\n"}, {},
                      r".*/side\.py:1: side imports autocastgen\.high, a layer above it \(.*\)",
                      {"high/_helper.py": "from ..side import os\n\n\ndef help():\n    pass\n"}, {}),
    "its own layer": ({"side.py": "from .low import thing\n"}, {},
                      r".*/side\.py:1: side imports autocastgen\.low, of its own layer \(_core < low side < .*\)",
                      {"side.py": "from .low import thing\n"}, {"side": 2}),
    "an optional package outside its boundary": ({"low.py": SMALL["low.py"] + "import onnx\n"}, {},
                                                 r".*/low\.py:10: imports the optional onnx outside its boundary "
                                                 r"\(autocastgen\.deploy\._onnx\.packages\)",
                                                 {"low.py": SMALL["low.py"] + "import json as onnx\n"}, {}),
    "an optional package outside a try": ({"deploy/_onnx/packages.py": "import onnx\n"}, {},
                                          r".*/packages\.py:1: imports the optional onnx outside a try that says what "
                                          r"to install", {"deploy/_onnx/packages.py": "try:\n    import onnx\n"
                                                          "except (ValueError, ModuleNotFoundError):\n    onnx = None\n"},
                                          {}),
    "an undeclared package": ({"low.py": SMALL["low.py"] + "import requests\n"}, {},
                              r".*/low\.py:10: imports requests, which pyproject\.toml does not declare",
                              {"low.py": SMALL["low.py"] + "import sqlite3\n"}, {}),
    "a layer of no feature": ({}, {"ghost": 1}, r"docs/architecture\.md's python layers list ghost, which the package "
                              r"does not have", {"ghost/__init__.py": "__all__ = []\n"}, {"ghost": 1}),
    "an import cycle": ({"high/_helper.py": "from . import _run\n\n\ndef help():\n    pass\n"}, {},
                        r"an import cycle: autocastgen\.high\._helper <-> autocastgen\.high\._run",
                        {"high/_helper.py": "from ..low import thing\n\n\ndef help():\n    pass\n"}, {}),
    "too many top modules": ({**_TOP, "top9.py": ""}, {f"top{i}": 1 for i in range(10)},
                             r"13 modules directly in python/autocastgen \(at most 12\): .*", _TOP,
                             {f"top{i}": 1 for i in range(9)}),
    "no __all__": ({"high/__init__.py": "from ._run import run\n"}, {}, r".*/high/__init__\.py: declares no __all__ \(a package's public names\)",
                   {"_core/__init__.py": "from .atomic import os\n"}, {}),
    "an unsorted __all__": ({"high/__init__.py": 'from ._helper import help\nfrom ._run import run\n\n'
                             '__all__ = ["run", "help"]\n'}, {}, r".*/high/__init__\.py: __all__ is not sorted",
                            {"high/__init__.py": 'from ._helper import help\nfrom ._run import run\n\n'
                             '__all__ = ["help", "run"]\n'}, {}),
    "an __all__ of what is not bound": ({"high/__init__.py": 'from ._run import run\n\n__all__ = ["run", "walk"]\n'},
                                        {}, r".*/high/__init__\.py: __all__ names what it does not bind: walk",
                                        {"high/__init__.py": 'from ._run import run\n\n__all__ = ["_helper", "run"]\n'},
                                        {}),
    "a submodule shadowing a name": ({"_core/__init__.py": "def atomic():\n    pass\n"}, {},
                                     r".*/_core/__init__\.py: the submodule atomic shadows the name "
                                     r"autocastgen\._core\.atomic \(importing it replaces that name with the module\)",
                                     {"_core/__init__.py": "def atomics():\n    pass\n"},
                                     {}),
    "named private twice": ({"_core/_extra.py": ""}, {}, r"autocastgen\._core\._extra: named private twice \(its folder is private already\)",
                            {"_core/extra.py": ""}, {}),
    "a public package's public module": ({"high/extra.py": ""}, {},
                                         r"autocastgen\.high\.extra: a public package's module; name it _extra.*",
                                         {"high/_extra.py": ""}, {}),
    "a prefix family": ({"high/_run_fast.py": "", "high/_run_slow.py": ""}, {},
                        r".*/high/__init__\.py: a prefix family _run_\*: _run_fast, _run_slow \(make it a folder\)",
                        {"high/_run_fast.py": "", "high/_walk_slow.py": ""}, {}),
    "torch in a torch-free module": ({"_core/atomic.py": "from . import helper\n", "_core/helper.py": "import torch\n"},
                                     {}, r"autocastgen\._core\.atomic must import without torch .*, but "
                                     r"autocastgen\._core\.atomic -> autocastgen\._core\.helper imports torch "
                                     r"\(.*/helper\.py:1\)",
                                     {"_core/atomic.py": "from . import helper\n",
                                      "_core/helper.py": "def later():\n    import torch\n"}, {}),
}


def small_package(root: Path, files: dict[str, str | None]) -> Path:
    """SMALL with ``files`` written over it (None: removed), under ``root``/autocastgen."""
    source = root / PACKAGE
    for name, text in {**SMALL, **files}.items():
        if text is not None:
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_text(text)
    return source


def test_the_small_package_keeps_every_rule(tmp_path):
    assert problems(read_package(small_package(tmp_path, {})), SMALL_LAYERS) == []


@pytest.mark.parametrize("rule", sorted(RULE_CASES))
def test_each_rule_reports_its_case_alone(rule, tmp_path):
    breaks, layers, wanted, keeps, near_layers = RULE_CASES[rule]
    found = problems(read_package(small_package(tmp_path / "breaks", breaks)), {**SMALL_LAYERS, **layers})
    assert len(found) == 1 and re.fullmatch(wanted, found[0]), (rule, found)
    near_miss = problems(read_package(small_package(tmp_path / "keeps", keeps)), {**SMALL_LAYERS, **near_layers})
    assert near_miss == [], (rule, near_miss)


# --- the build's copy, and what imports -------------------------------------------------------

# Under ctest (AUTOCASTGEN_BUILD_DIR) they run, and fail where the build lacks the package; by hand
# against an unbuilt tree they skip.
needs_build = pytest.mark.skipif(not (BUILD / "python" / PACKAGE / "__init__.py").is_file()
                                 and "AUTOCASTGEN_BUILD_DIR" not in os.environ,
                                 reason=f"{BUILD} has no python/autocastgen (build the autocastgen_python target)")


def _shipped(path: Path) -> bool:
    return path.suffix == ".py" or path.name == "py.typed" or path.name.startswith("report.")


@needs_build
def test_the_build_copies_the_whole_package_and_nothing_stale():
    built = BUILD / "python" / PACKAGE
    sources = {p.relative_to(SOURCE) for p in SOURCE.rglob("*") if p.is_file() and "__pycache__" not in p.parts
               and _shipped(p)}
    missing = sorted(str(p) for p in sources if not (built / p).is_file()
                     or (built / p).read_bytes() != (SOURCE / p).read_bytes())
    assert not missing, f"python/CMakeLists.txt did not copy (or copied an older) {missing}"
    generated = {f"{name.rpartition('.')[2]}.py" for name in GENERATED}
    stale = sorted(str(p.relative_to(built)) for p in built.rglob("*.py") if "__pycache__" not in p.parts
                   and p.relative_to(built) not in sources and str(p.relative_to(built)) not in generated)
    assert not stale, f"the build's package has modules the source does not: {stale}"


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environment.update(PYTHONPATH=str(BUILD / "python"), **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment, timeout=300,
                          cwd=ROOT)


DOCUMENTED = re.compile(r"(?<![\w.:/-])autocastgen(?:\.[A-Za-z_]\w*)+")


def documented_paths() -> tuple[list[str], list[str]]:
    """The dotted paths the docs name (not torch.ops.autocastgen.* or pkg.autocastgen.* keys) and
    the modules they run with `python -m`."""
    names, runs = set(), set()
    for doc in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        text = doc.read_text(encoding="utf-8")
        names |= {m.group(0) for m in DOCUMENTED.finditer(text)}
        runs |= set(re.findall(r"python3? -m (autocastgen(?:\.\w+)*)", text))
    return sorted(names), sorted(runs)


@needs_build
def test_every_module_imports_and_every_documented_path_resolves():
    names, runs = documented_paths()
    modules = sorted(read_package())
    code = f"""
import importlib, importlib.util, json, sys, types
import autocastgen
bad = []
for name in {modules!r}:
    if name.endswith(".__main__"):
        continue
    try:
        importlib.import_module(name)
    except ImportError as error:
        extra = {NEEDS_EXTRA!r}.get(name)
        if extra is None or f"pip install {{extra}}" not in str(error):
            bad.append(f"import {{name}}: {{type(error).__name__}}: {{error}}")
    except Exception as error:
        bad.append(f"import {{name}}: {{type(error).__name__}}: {{error}}")
# After every module is imported: the names each package declares are still what it declares
# (a submodule imported later would have replaced a function of its name).
for name in {modules!r}:
    if name.endswith(".__main__") or (name in {NEEDS_EXTRA!r} and name not in sys.modules):
        continue  # a framework not installed here: said above
    module = importlib.import_module(name)
    for public in getattr(module, "__all__", ()):
        try:
            value = getattr(module, public)
        except ImportError as error:
            # a framework's class, asked for where the framework is not installed: says its extra
            if not any(f"pip install {{extra}}" in str(error) for extra in {NEEDS_EXTRA!r}.values()):
                bad.append(f"{{name}}.{{public}}: {{type(error).__name__}}: {{error}}")
            continue
        if isinstance(value, types.ModuleType) and value.__name__ != f"{{name}}.{{public}}":
            bad.append(f"{{name}}.{{public}} is the module {{value.__name__}}")
    if name == "autocastgen" and not callable(module.advise):
        bad.append("autocastgen.advise is not the function")
for path in {names!r}:
    if any((path + ".").startswith(m + ".") and m not in sys.modules for m in {NEEDS_EXTRA!r}):
        continue  # in a module whose framework is not installed here
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
            break
        except ImportError:
            continue
    try:
        for part in parts[cut:]:
            value = getattr(value, part)
    except AttributeError:
        bad.append(f"documented {{path}} does not resolve")
    except ImportError as error:
        if not any(f"pip install {{extra}}" in str(error) for extra in {NEEDS_EXTRA!r}.values()):
            bad.append(f"documented {{path}}: {{type(error).__name__}}: {{error}}")
for run in {runs!r}:
    spec = importlib.util.find_spec(run)
    if spec is None or (spec.submodule_search_locations is not None
                        and importlib.util.find_spec(run + ".__main__") is None):
        bad.append(f"documented python -m {{run}} runs nothing")
print(json.dumps(bad))
"""
    done = _run(code)
    assert done.returncode == 0, done.stderr[-4000:]
    bad = json.loads(done.stdout.strip().splitlines()[-1])
    assert not bad, "\n".join(bad)
    assert "autocastgen.compile.CacheError" in names and "autocastgen.advisor" in runs, (names, runs)


@needs_build
def test_a_missing_onnx_says_what_to_install():
    code = """
import sys
sys.modules["onnx"] = None  # as if not installed: `import onnx` raises ImportError
import torch, autocastgen
try:
    autocastgen.export_onnx(torch.nn.Linear(2, 2), (torch.ones(1, 2),), device="cpu", dtype=torch.bfloat16)
except ImportError as error:
    print(error)
"""
    done = _run(code)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "pip install onnx onnxscript onnxruntime" in done.stdout, done.stdout


@needs_build
def test_the_package_imports_no_yaml(tmp_path):
    """PyYAML is not a dependency (torch does not bring it): with ``import yaml`` failing, every module
    imports, and the advisor's base policy (load_policy, then base_autocast, as _check_base reads it)
    gives through its ``extends:`` chain what the advisor read with PyYAML: the nearest file's device
    and ``lower_precision:``, else the device's default dtype alone; a folder that is not UTF-8 too."""
    policies = ROOT / "schemas" / "policies"
    odd = os.fsdecode(b"odd \xff")
    for folder in ("bases", "derived", odd):
        (tmp_path / folder).mkdir()
    cases = {  # file -> (its text, what base_autocast gives)
        "bases/cpu_fp16.yaml": (f"extends: {json.dumps(str(policies / 'cpu.yaml'))}\n"
                                "autocast:\n  lower_precision: [float16]\n", ["cpu", ["float16"]]),
        "bases/bare.yaml": ("autocast:\n  device: cpu\n", ["cpu", ["bfloat16"]]),
        "derived/inherits.yaml": ("extends: ../bases/cpu_fp16.yaml\n", ["cpu", ["float16"]]),
        "derived/defaults.yaml": ("extends: ../bases/bare.yaml\n", ["cpu", ["bfloat16"]]),
        "derived/moves.yaml": ("extends: ../bases/cpu_fp16.yaml\nautocast:\n  device: cuda\n", ["cuda", ["float16"]]),
        "derived/cuda.yaml": (f"extends: {json.dumps(str(policies / 'cuda.yaml'))}\n",
                              ["cuda", ["float16", "bfloat16"]]),
        f"{odd}/odd.yaml": ("extends: ../derived/inherits.yaml\nautocast:\n  lower_precision: [bfloat16, float16]\n",
                            ["cpu", ["bfloat16", "float16"]]),
    }
    for name, (text, _) in cases.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    paths = [os.fsencode(tmp_path / name).hex() for name in cases]
    # The integrations import their frameworks, which may need PyYAML themselves (Lightning does).
    modules = sorted(name for name in read_package() if not name.endswith(".__main__") and name not in NEEDS_EXTRA)
    code = f"""
import importlib, json, os, sys
sys.modules["yaml"] = None  # as if PyYAML were not installed: `import yaml` raises ImportError
for name in {modules!r}:
    importlib.import_module(name)
from autocastgen.advisor import base_autocast
from autocastgen.policy import clear_runtime_policies, load_policy
got = []
for path in {paths!r}:
    path = os.fsdecode(bytes.fromhex(path))
    clear_runtime_policies()
    load_policy(path)
    got.append(list(base_autocast(path)))
print(json.dumps(got))
"""
    done = _run(code)
    assert done.returncode == 0, done.stderr[-4000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == [expected for _, expected in cases.values()]
