"""Count the places where the tests patch the planner's module globals (issue 51, item 4).

A *patch* is, in ``tests/*.py`` (conftest.py included), one of:

* ``<anything>.setattr(M, "name", ...)`` / ``.delattr(M, "name")`` (``monkeypatch``, a
  ``MonkeyPatch.context()``'s ``m``), or the same with a dotted string
  ``"welchpeaks.plan.<module>.<name>"``;
* ``<anything>.setitem(M.NAME, ...)`` / ``.delitem(M.NAME, ...)``;
* ``mock.patch("welchpeaks.plan....")``, ``mock.patch.object(M, ...)``, ``mock.patch.dict(M.NAME, ...)``;
* an assignment, augmented assignment or ``del`` whose target is ``M.NAME`` or ``M.NAME[...]``;
* a mutating call on a module global: ``M.NAME.clear()`` (also pop, popitem, update, append,
  extend, add, discard, remove, setdefault, put);

where ``M`` is a module of ``welchpeaks.plan`` as the file names it (``from welchpeaks.plan
import calibrate``, ``import welchpeaks.plan.cost as cost_mod``, ``welchpeaks.plan.measure``,
a loop variable over a tuple of such modules). Reported beside it, not counted as patches:
calls of ``set_cost_model`` (the public setter of the process-wide model store) and reads of
a plan module's private global (``calibrate._BACKGROUND``).

    python tools/count_plan_patches.py            # the working tree
    python tools/count_plan_patches.py --rev 7cb5f58 -v   # a commit, every hit listed
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTATORS = {"clear", "pop", "popitem", "update", "append", "extend", "add", "discard", "remove", "setdefault", "put"}


def _files(rev: str | None) -> dict[str, str]:
    """tests/*.py of the working tree or of ``rev``: path -> source."""
    if rev is None:
        return {str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "tests").glob("*.py"))}
    names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", rev, "tests/"], check=True,
                           capture_output=True, text=True).stdout.split()
    return {n: subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{n}"], check=True, capture_output=True,
                              text=True).stdout for n in names if n.endswith(".py") and "/" not in n[6:]}


def _plan_modules(rev: str | None) -> set[str]:
    """The module names of welchpeaks.plan at ``rev`` (or in the working tree)."""
    if rev is None:
        return {p.stem for p in (ROOT / "src/welchpeaks/plan").glob("*.py")}
    out = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", rev, "src/welchpeaks/plan/"], check=True,
                         capture_output=True, text=True).stdout.split()
    return {Path(n).stem for n in out if n.endswith(".py")}


class _Counter(ast.NodeVisitor):
    def __init__(self, modules: set[str]):
        self.modules = modules - {"__init__"}
        self.aliases: set[str] = set()  # names bound to a plan module
        self.package: set[str] = set()  # names bound to welchpeaks.plan itself
        self.root: set[str] = set()  # names bound to welchpeaks
        self.patches: list[tuple[int, str]] = []
        self.setters: list[int] = []
        self.reads: list[tuple[int, str]] = []

    # ----------------------------------------------------------- which names are plan modules
    def collect(self, tree: ast.AST) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("welchpeaks.plan.") and a.name.count(".") == 2 and a.asname:
                        self.aliases.add(a.asname)
                    elif a.name == "welchpeaks.plan" and a.asname:
                        self.package.add(a.asname)
                    elif a.name.split(".")[0] == "welchpeaks" and not a.asname:
                        self.root.add("welchpeaks")
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    if node.module == "welchpeaks.plan" and a.name in self.modules:
                        self.aliases.add(a.asname or a.name)
                    elif node.module == "welchpeaks" and a.name == "plan":
                        self.package.add(a.asname or a.name)
        for node in ast.walk(tree):  # for module in (picker, planner): ...
            if (isinstance(node, ast.For) and isinstance(node.target, ast.Name)
                    and isinstance(node.iter, (ast.Tuple, ast.List)) and node.iter.elts
                    and all(self.is_module(e) for e in node.iter.elts)):
                self.aliases.add(node.target.id)

    def is_module(self, e: ast.AST) -> bool:
        if isinstance(e, ast.Name):
            return e.id in self.aliases
        if isinstance(e, ast.Attribute) and e.attr in self.modules:
            v = e.value
            if isinstance(v, ast.Name) and v.id in self.package:
                return True
            return (isinstance(v, ast.Attribute) and v.attr == "plan" and isinstance(v.value, ast.Name)
                    and v.value.id in self.root)
        return False

    def is_global(self, e: ast.AST) -> bool:
        """``M.NAME``, a plan module's attribute."""
        return isinstance(e, ast.Attribute) and self.is_module(e.value)

    @staticmethod
    def _text(e: ast.AST) -> str:
        return ast.unparse(e)[:90]

    # ----------------------------------------------------------------------------- the hits
    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        first = node.args[0] if node.args else None
        hit = False
        if name in ("setattr", "delattr") and first is not None:
            hit = self.is_module(first) or (isinstance(first, ast.Constant) and isinstance(first.value, str)
                                            and first.value.startswith("welchpeaks.plan."))
        elif name in ("setitem", "delitem") and first is not None:
            hit = self.is_global(first)
        elif name == "patch" and isinstance(first, ast.Constant) and isinstance(first.value, str):
            hit = first.value.startswith("welchpeaks.plan.")
        elif (name in ("object", "dict") and isinstance(f, ast.Attribute) and isinstance(f.value, ast.Attribute)
              and f.value.attr == "patch" and first is not None):
            hit = self.is_module(first) or self.is_global(first)
        elif name in MUTATORS and isinstance(f, ast.Attribute):
            hit = self.is_global(f.value)
        if hit:
            self.patches.append((node.lineno, self._text(node)))
        if name == "set_cost_model":
            self.setters.append(node.lineno)
        self.generic_visit(node)

    def _targets(self, targets: list[ast.AST], node: ast.AST) -> None:
        for t in targets:
            for e in ast.walk(t) if isinstance(t, (ast.Tuple, ast.List)) else [t]:
                base = e.value if isinstance(e, ast.Subscript) else e
                if self.is_global(base):
                    self.patches.append((node.lineno, self._text(node)))

    def visit_Assign(self, node: ast.Assign) -> None:
        self._targets(node.targets, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._targets([node.target], node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._targets([node.target], node)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        self._targets(node.targets, node)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if self.is_module(node.value) and node.attr.startswith("_") and not node.attr.startswith("__"):
            self.reads.append((node.lineno, self._text(node)))
        self.generic_visit(node)


def count(rev: str | None = None) -> dict[str, dict]:
    """Per test file: its patches (line, text), set_cost_model calls and private reads."""
    modules = _plan_modules(rev)
    out = {}
    for path, text in _files(rev).items():
        c = _Counter(modules)
        tree = ast.parse(text)
        c.collect(tree)
        c.visit(tree)
        if c.patches or c.setters or c.reads:
            out[path] = {"patches": sorted(c.patches), "setters": c.setters, "reads": sorted(c.reads)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", help="a commit (default: the working tree)")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every patch")
    args = ap.parse_args(argv)
    got = count(args.rev)
    total = sum(len(v["patches"]) for v in got.values())
    for path, v in got.items():
        if v["patches"] or args.verbose:
            print(f"{path}: {len(v['patches'])} patches, {len(v['setters'])} set_cost_model, "
                  f"{len(v['reads'])} private reads")
        if args.verbose:
            for line, text in v["patches"]:
                print(f"    {line}: {text}")
            for line, text in v["reads"]:
                print(f"    {line}: (read) {text}")
    print(f"total: {total} patches of welchpeaks.plan module globals; "
          f"{sum(len(v['setters']) for v in got.values())} set_cost_model calls; "
          f"{sum(len(v['reads']) for v in got.values())} reads of private plan globals")
    return 0


if __name__ == "__main__":
    sys.exit(main())
