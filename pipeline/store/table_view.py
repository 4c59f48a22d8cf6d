"""The one consistent view of a data folder's tables: which generation of each table is current.

Stages publish each table's new generation as its own folder (``parquet/<table>/<gen>/``);
nothing a reader follows changes until the run has published all of them. Then one atomic
rename switches the view:

    tables -> .views/NNNNNN           the pointer readers follow (a symlink, replaced at once)
    .views/NNNNNN/<table> -> ../../parquet/<table>/<gen>

So ``DATADIR/tables/<table>/**/*.parquet`` is the documented glob, and it never reaches a
generation being written (``parquet/<table>/.<gen>.tmp``) or an older one. A reader that
resolves ``tables`` once (``realpath``) holds one publication until the next run finishes; a
run killed before the switch leaves the previous view whole, and generations a view
references are never removed. (No DuckDB file is kept here: writing one would load DuckDB
into every run, which a Flow replay keeps out to stay within flow-go's memory.)
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from rechain.pipeline.errors import RechainError
from rechain.workers.fault_injection import kill_point

#: The pointer readers follow, relative to the data folder.
VIEW_LINK = "tables"
#: The immutable view folders the pointer switches between.
VIEWS_DIR = ".views"


def newest_generation(table_dir: Path) -> Path | None:
    """A table's newest published generation folder (``NNNNNN``), or None: what the stages of
    a run read and write next. Readers use ``current_tables`` instead."""
    if not table_dir.is_dir():
        return None
    gens = sorted(p for p in table_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
    return gens[-1] if gens else None


def current_view(data: Path) -> Path | None:
    """The current view folder (``DATADIR/.views/NNNNNN``), or None before the first run
    finished publishing."""
    link = data / VIEW_LINK
    try:
        target = os.readlink(link)
    except FileNotFoundError:
        return None
    except OSError:
        # A folder where the link should be: a copy of the data folder that followed the
        # links (``cp -rL``, ``shutil.copytree``). Its next run makes the view again.
        if link.is_dir():
            return None
        raise RechainError(f"{link}: not rechain's table view") from None
    return data / target


def current_tables(data: Path) -> dict[str, Path]:
    """Each table's current generation folder, read once from the view, so a reader that
    uses these paths sees one publication even while a run switches the view."""
    link = data / VIEW_LINK
    if link.is_dir() and not link.is_symlink():
        # A copy that followed the links: its folders hold one view's files, as copied.
        return {e.name: e for e in sorted(link.iterdir()) if e.is_dir()}
    view = current_view(data)
    if view is None or not view.is_dir():
        return {}
    return {
        entry.name: (view / os.readlink(entry)).resolve()
        for entry in sorted(view.iterdir())
        if entry.is_symlink()
    }


def current_generation_name(data: Path, table: str) -> str | None:
    """The generation folder name (``NNNNNN``) the view holds for ``table``, or None: what a
    stage removing a table's old generations keeps until the run switches the view."""
    view = current_view(data)
    if view is None:
        return None
    try:
        return Path(os.readlink(view / table)).name
    except OSError:
        return None


def publish_view(data: Path) -> Path | None:
    """Switches the view to the newest generation of every table (no new view when it already
    is one), then removes what no view references any more. Returns the view folder."""
    parquet = data / "parquet"
    if not parquet.is_dir():
        return None
    newest = {
        t.name: gen
        for t in sorted(parquet.iterdir())
        if t.is_dir() and (gen := newest_generation(t)) is not None
    }
    folder = current_view(data)
    if (
        folder is None
        or not folder.is_dir()
        or _targets(folder) != {t: g.name for t, g in newest.items()}
    ):
        folder = _new_view(data, newest)
        if (data / VIEW_LINK).is_dir() and not (data / VIEW_LINK).is_symlink():
            shutil.rmtree(data / VIEW_LINK)  # a copy's followed links (``current_view``)
        # The switch: a new link renamed over the old one, atomically.
        _replace(data / VIEW_LINK, lambda tmp: os.symlink(Path(VIEWS_DIR, folder.name), tmp))
        kill_point("store.view_switched")
    _fsync_dir(data)
    _collect(data, folder)
    return folder


def _new_view(data: Path, generations: dict[str, Path]) -> Path:
    """A new, immutable view folder over ``generations``, made whole before it gets its name."""
    views = data / VIEWS_DIR
    views.mkdir(exist_ok=True)
    number = 1 + max((int(p.name) for p in views.iterdir() if p.name.isdigit()), default=0)
    folder = views / f"{number:06d}"
    tmp = views / f".{number:06d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for table, gen in generations.items():
        os.symlink(Path("..", "..", "parquet", table, gen.name), tmp / table)
    _fsync_dir(tmp)
    os.rename(tmp, folder)
    _fsync_dir(views)
    return folder


def _replace(final: Path, make: Callable[[Path], object]) -> None:
    tmp = final.with_name(f".{final.name}.tmp")
    tmp.unlink(missing_ok=True)
    make(tmp)
    os.rename(tmp, final)


def view_problems(data: Path) -> list[str]:
    """What readers would miss: a table whose newest generation the view does not hold yet
    (a run stopped between publishing and switching the view)."""
    parquet = data / "parquet"
    if not parquet.is_dir() or current_view(data) is None and (data / VIEW_LINK).is_dir():
        return []  # no view yet, or a copy that followed its links: which one is unknown
    view = {t: p.name for t, p in current_tables(data).items()}
    lagging = sorted(
        t.name
        for t in parquet.iterdir()
        if (gen := newest_generation(t)) is not None and view.get(t.name) != gen.name
    )
    if not lagging:
        return []
    return [
        f"the tables view does not yet show the newest {', '.join(lagging)} (a run stopped "
        "before it finished publishing); rerun it"
    ]


def _targets(view: Path) -> dict[str, str]:
    return {e.name: Path(os.readlink(e)).name for e in view.iterdir() if e.is_symlink()}


def _collect(data: Path, current: Path) -> None:
    """Removes the older view folders and every published generation no view holds now."""
    for old in (data / VIEWS_DIR).iterdir():
        if old != current:
            shutil.rmtree(old, ignore_errors=True)
    keep = _targets(current)
    for table, gen in keep.items():
        for child in (data / "parquet" / table).iterdir():
            if not child.name.startswith(".") and child.name != gen:
                shutil.rmtree(child, ignore_errors=True)


def parquet_sql(folder: Path) -> str:
    """The SELECT over one table generation's Parquet files, its ``height_range`` partitions
    as a column."""
    pattern = str(folder / "**" / "*.parquet").replace("'", "''")
    return f"SELECT * FROM read_parquet('{pattern}', hive_partitioning = true)"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
