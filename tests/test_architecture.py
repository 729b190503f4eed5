"""docs/ARCHITECTURE.md's layer map is held to the code: every module of a package that has a
layers contract in pyproject.toml is in that contract, and every module a contract names is in
the map (the map fell five modules behind when nothing held it)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src"


def _contracts() -> list[dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]


def _names(layers: list[str]) -> set[str]:
    return {name.strip() for layer in layers for name in layer.split("|")}


def _modules(container: str) -> set[str]:
    """The modules directly in a package: its ``.py`` files and its packages, less ``__init__``
    and ``__main__``."""
    folder = PACKAGE.joinpath(*container.split("."))
    files = {p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__")}
    return files | {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}


def _layer_map() -> str:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = text[text.index("## Layers"):]
    return section[section.index("```") + 3:section.index("```", section.index("```") + 3)]


CONTRACTS = _contracts()


@pytest.mark.parametrize("contract", CONTRACTS, ids=[c["containers"][0] for c in CONTRACTS])
def test_every_module_is_in_its_packages_contract(contract):
    container = contract["containers"][0]
    missing = _modules(container) - _names(contract["layers"])
    assert not missing, f"{container}: modules in no layer of pyproject.toml's contract: {sorted(missing)}"


@pytest.mark.parametrize("contract", CONTRACTS, ids=[c["containers"][0] for c in CONTRACTS])
def test_every_module_of_a_contract_is_in_the_layer_map(contract):
    text = _layer_map()
    missing = {name for name in _names(contract["layers"]) if not re.search(rf"(?<![\w/]){re.escape(name)}(?!\w)", text)}
    assert not missing, f"docs/ARCHITECTURE.md's layer map does not name {sorted(missing)}"


def test_the_top_layers_are_in_the_maps_order():
    """The top-level layers, as the map lists them down its left column, in the contract's order."""
    top = next(c for c in CONTRACTS if c["containers"] == ["welchpeaks"])
    order = [name for layer in top["layers"] for name in (n.strip() for n in layer.split("|"))]
    column = [w for line in _layer_map().splitlines() if line[:1].strip()
              for w in re.findall(r"\w+", line.split("  ")[0])]
    shown = [name for name in column if name in order]
    assert shown == order, f"the map's left column: {shown}"
