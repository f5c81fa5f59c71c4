"""Which local files a contract may point at: ``fetch.fixture_dir`` and ``targets.file``.

A contract is data, often written by someone other than the operator, so the paths in it are confined:
after resolving ``..`` and symlinks they must lie inside an allowed root, and no part below that root may
be hidden (``.env``, ``.git``, ``.dagster_home``). The allowed roots are

- the folder holding the contract's folder (the project: ``contracts/`` next to ``examples/``), or the
  contract's folder itself when that sits at the filesystem root;
- ``SCRAPE_CONTRACTS_FIXTURE_ROOT`` when the operator sets it (it replaces every contract's fixture_dir).

The loader checks this (``scrape-contracts validate`` names the setting) and the fetch checks it again, so a
symlink swapped in after loading is refused too.
"""

from __future__ import annotations

from pathlib import Path

from scrape_contracts import settings

ROOT_HINT = (
    "keep the files inside the project (the folder holding the contracts folder), or point "
    "SCRAPE_CONTRACTS_FIXTURE_ROOT at their folder"
)


def allowed_roots(contract_dir: Path) -> tuple[Path, ...]:
    folder = Path(contract_dir).resolve()
    project = folder.parent if folder.parent != folder.parent.parent else folder
    roots = [project]
    override = settings.fixture_root()
    if override is not None:
        roots.append(override)
    return tuple(roots)


def confined_problem(setting: str, value: str, contract_dir: Path) -> str | None:
    """Why ``value`` (the contract's ``setting``, relative to ``contract_dir``) may not be read, or None."""
    return outside_roots_problem(setting, value, Path(contract_dir) / value, allowed_roots(contract_dir))


def outside_roots_problem(setting: str, value: str, path: Path, roots: tuple[Path, ...]) -> str | None:
    resolved = path.resolve()
    for root in roots:
        if resolved.is_relative_to(root):
            hidden = [part for part in resolved.relative_to(root).parts if part.startswith(".")]
            if hidden:
                return (f"{setting} {value!r} resolves to {resolved}, inside the hidden folder or file "
                        f"{hidden[0]!r}; hidden files are never read")
            return None
    allowed = ", ".join(str(root) for root in roots)
    return f"{setting} {value!r} resolves to {resolved}, outside the allowed folders ({allowed}); {ROOT_HINT}"
