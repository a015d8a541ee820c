"""The map is the house: ``docs/modules.md``'s table and every package's ``__init__`` docstring are held to the
package as built, so that a module added, moved or removed, or an edge of the layers changed, fails here until the
map says so too (issue 47 item 4: the map had drifted).

- The table has one row per package of ``octlm/``. Its "may import" column is that package's row of
  ``test_layering.ALLOWED``: the packages it may import, comma-separated, or ``nothing of octlm``, or ``everything``
  (every layer below it). Its "modules" column names each module and subpackage of the package once, a subpackage as
  ``name/`` with its own modules in parentheses (``runs/ (runfile, evalblocks)``), and nothing that does not exist.
- Every package's ``__init__`` docstring names each of its modules once as ``name`` and each subpackage once as
  ``name/``, in double backticks. Any other bare lowercase name in double backticks must be one of them too (a folder
  of data files, such as ``corpora/``, may be named): a name of another kind is written so that it cannot be taken
  for a module (``reporting.counted``, ``octlm rm``, ``store/sweeps/``). Its "May import:" sentence is its layer's
  row of ``ALLOWED`` (required in a package of the root; a subpackage that says one names no layer its own may not
  import).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.test_layering import ALLOWED, LAYERS, PACKAGE

MODULES_MD = PACKAGE.parent / "docs" / "modules.md"
BARE = re.compile(r"``([a-z_][a-z0-9_]*/?)``")  # a name in double backticks that could be a module's
MAY_IMPORT = re.compile(r"May import:(.*?)(?:\.\s|\.$|\n\n|$)", re.S)


def contents(folder: Path) -> dict[str, Path]:
    """{``name`` of a module, ``name/`` of a subpackage: its path} in the package ``folder``."""
    found = {p.stem: p for p in folder.glob("*.py") if p.name != "__init__.py"}
    found.update({f"{d.name}/": d for d in folder.iterdir() if (d / "__init__.py").is_file()})
    return found


def data_folders(folder: Path) -> set[str]:
    """``name/`` of each folder in ``folder`` that is not a package (templates, corpora): it may be named."""
    return {f"{d.name}/" for d in folder.iterdir() if d.is_dir() and d.name != "__pycache__"} - set(contents(folder))


def packages(root: Path) -> list[Path]:
    """Every package under the root (not the root itself)."""
    return sorted(init.parent for init in root.rglob("__init__.py") if init.parent != root)


def layer_of(root: Path, folder: Path) -> str:
    return folder.relative_to(root).parts[0]


Edges = tuple[dict[str, set[str]], list[str]]  # (ALLOWED, LAYERS): the table of edges and the layers' order
EDGES: Edges = (ALLOWED, LAYERS)


def said_layers(text: str, layer: str, edges: Edges) -> set[str] | None:
    """The layers a "may import" text names: ``everything`` is every layer below ``layer``, ``nothing of octlm`` none;
    None when it says neither and names no layer, or names one that is not a layer."""
    allowed, layers = edges
    words = text.strip().strip(".").strip()
    if words.startswith("everything"):
        return set(layers[: layers.index(layer)]) - {""}
    if words.startswith("nothing of octlm"):
        return set()
    if "``" in words:  # a docstring: the layers in double backticks (``run/``, a folder, is not one)
        named = set(re.findall(r"``([a-z]+)``", words))
    else:  # the table: comma-separated
        named = {word.strip(" `") for word in words.split(",")}
    return named if named and named <= set(allowed) else None


# ---------------------------------------------------------------- docs/modules.md's table


def table(markdown: str) -> dict[str, tuple[str, str]]:
    """{package: (its modules column, its may-import column)} of the table whose header names those columns."""
    rows: dict[str, tuple[str, str]] = {}
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| package |"))
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        rows[cells[0].strip("`").rstrip("/")] = (cells[2], cells[3])
    return rows


def parse_listing(text: str) -> list[tuple[str, list | None]]:
    """``a, b/ (c, d), e/`` -> [("a", None), ("b/", [("c", None), ("d", None)]), ("e/", None)]."""
    entries: list[tuple[str, list | None]] = []
    text = text.replace("`", "")
    i = 0
    while i < len(text):
        match = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*/?)\s*").match(text, i)
        if match is None:
            raise ValueError(f"cannot read {text[i:]!r} as a module listing")
        name, i = match.group(1), match.end()
        inner = None
        if i < len(text) and text[i] == "(":
            depth, j = 1, i + 1
            while depth:
                depth += {"(": 1, ")": -1}.get(text[j], 0)
                j += 1
            inner, i = parse_listing(text[i + 1 : j - 1]), j
        entries.append((name, inner))
        rest = re.compile(r"\s*,?").match(text, i)
        i = rest.end() if rest else i
    return entries


def listing_offenders(folder: Path, listing: list[tuple[str, list | None]], where: str) -> list[str]:
    """What the listing of ``folder`` gets wrong: a module or subpackage missing, named twice or that does not exist,
    a subpackage without its modules."""
    bad, here = [], contents(folder)
    names = [name for name, _ in listing]
    for name in sorted(set(names)):
        if name not in here:
            hint = f" (a subpackage is written {name}/)" if f"{name}/" in here else ""
            bad.append(f"{where}: names {name}, which is not a module or subpackage there{hint}")
        elif names.count(name) > 1:
            bad.append(f"{where}: names {name} {names.count(name)} times")
    bad += [f"{where}: leaves out {name}" for name in sorted(set(here) - set(names))]
    for name, inner in listing:
        if name.endswith("/") and name in here:
            if inner is None:
                bad.append(f"{where}: names {name} without its modules in parentheses")
            else:
                bad += listing_offenders(here[name], inner, f"{where}{name}")
    return bad


def map_offenders(root: Path, markdown: str, edges: Edges = EDGES) -> list[str]:
    """What the table of ``markdown`` gets wrong about the package at ``root`` and its table of edges."""
    allowed, _ = edges
    rows, bad = table(markdown), []
    found = sorted(layer for layer in allowed if layer and (root / layer / "__init__.py").is_file())
    bad += [f"modules.md: no row for {layer}/" for layer in found if layer not in rows]
    bad += [f"modules.md: a row for {name}/, not a package of {root.name}/" for name in rows if name not in found]
    for layer in sorted(set(found) & set(rows)):
        modules_column, imports_column = rows[layer]
        where = f"modules.md's row {layer}/"
        try:
            bad += listing_offenders(root / layer, parse_listing(modules_column), where)
        except ValueError as error:
            bad.append(f"{where}: {error}")
        said = said_layers(imports_column, layer, edges)
        if said != allowed[layer]:
            shown = sorted(said) if said is not None else imports_column
            bad.append(f"{where} may import {shown}; tests/test_layering.py's ALLOWED: {sorted(allowed[layer])}")
    return bad


# ---------------------------------------------------------------- the packages' docstrings


def docstring_offenders(root: Path, edges: Edges = EDGES) -> list[str]:
    """What each package's ``__init__`` docstring gets wrong about its modules and its layer's imports."""
    bad = []
    for folder in packages(root):
        where = f"{folder.relative_to(root.parent)}/__init__.py"
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
        bad += imports_said(doc, root, folder, edges, where)
        named, here = BARE.findall(MAY_IMPORT.sub("", doc)), contents(folder)
        for name in sorted(set(named)):
            if name not in here and name not in data_folders(folder):
                hint = f"a subpackage is written ``{name}/``" if f"{name}/" in here else NOT_A_MODULE
                bad.append(f"{where}: names ``{name}``, which is not a module of {folder.name}/ ({hint})")
            elif named.count(name) > 1:
                bad.append(f"{where}: names ``{name}`` {named.count(name)} times (once is the map)")
        bad += [f"{where}: leaves out ``{name}``" for name in sorted(set(here) - set(named))]
    return bad


NOT_A_MODULE = "write another name so that it is not taken for a module: dotted, a path, ``octlm COMMAND``"


def imports_said(doc: str, root: Path, folder: Path, edges: Edges, where: str) -> list[str]:
    """A package of the root says what it may import, as its row of ALLOWED says; a subpackage may say it."""
    said, layer = MAY_IMPORT.search(doc), layer_of(root, folder)
    if said is None:
        return [f"{where}: no 'May import:' sentence"] if folder.parent == root else []
    says, row = said_layers(said.group(1), layer, edges), edges[0].get(layer, set())
    if says is None or (says != row if folder.parent == root else not says <= row):
        return [f"{where}: says 'May import:{said.group(1)}'; ALLOWED[{layer!r}] is {sorted(row)}"]
    return []


def test_modules_md_is_the_package() -> None:
    if offenders := map_offenders(PACKAGE, MODULES_MD.read_text()):
        pytest.fail(f"{len(offenders)} drift(s) of docs/modules.md:\n" + "\n".join(offenders), pytrace=False)


def test_every_package_docstring_names_its_modules() -> None:
    if offenders := docstring_offenders(PACKAGE):
        pytest.fail(f"{len(offenders)} drift(s) of the packages' docstrings:\n" + "\n".join(offenders), pytrace=False)


# ---------------------------------------------------------------- each check fails on a planted drift

GOOD_MD = """
| package | owns | modules | may import |
|---|---|---|---|
| `core/` | the base | errors, files/ (atomic, output) | nothing of octlm |
| `store/` | the registry | registry, base | core |
| `cli/` | the app | app, render | everything |

text after the table
"""
GOOD_TREE = {
    "__init__.py": '"""The face: ``load``."""\n',
    "core/__init__.py": '"""The base: ``errors`` and ``files/`` (``reporting.counted`` is not a module here).\n\n'
    'May import: nothing of octlm."""\n',
    "core/errors.py": "",
    "core/files/__init__.py": '"""Files: ``atomic``, ``output``."""\n',
    "core/files/atomic.py": "",
    "core/files/output.py": "",
    "store/__init__.py": '"""Store: ``registry`` on ``base``, the ``templates/`` folder. May import: ``core``."""\n',
    "store/registry.py": "",
    "store/base.py": "",
    "store/templates/page.html": "",
    "cli/__init__.py": '"""CLI: ``app``, ``render``. May import: everything."""\n',
    "cli/app.py": "",
    "cli/render.py": "",
}
EDGES_HERE: Edges = (
    {"core": set(), "store": {"core"}, "cli": {"core", "store"}, "": {"cli"}},
    ["core", "store", "cli", ""],
)
DRIFTS = {  # what a drift looks like -> (file, its new text), and the words the offence must hold
    "a module left out of the table": ("docs", GOOD_MD.replace("registry, base", "registry"), "leaves out base"),
    "a module the table names that is not there": ("docs", GOOD_MD.replace("base |", "base, merge |"), "names merge"),
    "a subpackage without its modules": ("docs", GOOD_MD.replace("files/ (atomic, output)", "files/"), "files/"),
    "a module of a subpackage missing": ("docs", GOOD_MD.replace("(atomic, output)", "(atomic)"), "leaves out output"),
    "an edge the layers forbid": ("docs", GOOD_MD.replace("| core |", "| core, cli |"), "may import"),
    "a row missing": ("docs", GOOD_MD.replace("| `cli/` | the app | app, render | everything |\n", ""), "no row"),
    "a module left out of a docstring": ("store/__init__.py", '"""``registry``. May import: ``core``."""', "``base``"),
    "a module named twice": (
        "cli/__init__.py",
        '"""``app``, ``render``, ``app``. May import: everything."""',
        "2 times",
    ),
    "a name that is no module": (
        "cli/__init__.py",
        '"""``app``, ``render``, ``compare``. May import: everything."""',
        "``compare``",
    ),
    "a subpackage named as a module": (
        "core/__init__.py",
        '"""``errors``, ``files``. May import: nothing of octlm."""',
        "``files/``",
    ),
    "a docstring's imports not the table's": (
        "store/__init__.py",
        '"""``registry``, ``base``. May import: ``cli``."""',
        "May import",
    ),
    "a package saying nothing of its imports": ("store/__init__.py", '"""``registry``, ``base``."""', "May import"),
    "a new module": ("cli/show.py", "", "show"),
}


def plant(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "octlm"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize("drift", DRIFTS)
def test_a_drift_of_the_map_is_found(drift: str, tmp_path: Path) -> None:
    root = plant(tmp_path, GOOD_TREE)
    assert map_offenders(root, GOOD_MD, EDGES_HERE) == [] and docstring_offenders(root, EDGES_HERE) == []
    name, text, words = DRIFTS[drift]
    markdown = GOOD_MD
    if name == "docs":
        markdown = text
    else:
        (root / name).write_text(text)
    found = map_offenders(root, markdown, EDGES_HERE) + docstring_offenders(root, EDGES_HERE)
    assert found and any(words in line for line in found), found
