"""Copy the tutorial notebooks that come with workbench into a folder of yours, to open in JupyterLab.

The notebooks travel inside the installed package (``workbench/resources/tutorials`` in the wheel; in an
editable install of a clone, the package is the clone and they are its ``notebooks/``). A copy records
each notebook's hash in ``.workbench-tutorials.json`` beside them, so that copying again updates the
notebooks nobody touched and leaves an edited one alone unless ``force=True``.

    $ workbench tutorials                 # into ./workbench-tutorials
    $ workbench tutorials ~/learn --force # replace edited copies too

Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> copied = copy_tutorials(folder)
    >>> sorted(copied.copied)[0]
    '00_tour.ipynb'
    >>> copy_tutorials(folder).unchanged == copied.copied
    True
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from workbench._distribution import DISTRIBUTION

DEFAULT_FOLDER = "workbench-tutorials"
MANIFEST = ".workbench-tutorials.json"
_PACKAGE = Path(__file__).resolve().parent


def tutorials_source() -> Path:
    """The folder the installed package keeps its tutorial notebooks in.

    Raises:
        FileNotFoundError: neither the wheel's folder nor an editable clone's ``notebooks/`` is there.
    """
    packaged = _PACKAGE / "resources" / "tutorials"
    editable_clone = _PACKAGE.parent / "notebooks"
    for folder in (packaged, editable_clone):
        if any(folder.glob("*.ipynb")):
            return folder
    raise FileNotFoundError(
        f"no tutorial notebooks in {packaged}: this installation of workbench lacks its package data; "
        f"reinstall it (pip install --force-reinstall {DISTRIBUTION})"
    )


@dataclass
class TutorialsCopy:
    """What `copy_tutorials` did, by notebook file name."""

    folder: Path
    copied: list[str] = field(default_factory=list)  # new, or replacing an untouched older copy
    unchanged: list[str] = field(default_factory=list)  # already this version's
    replaced: list[str] = field(default_factory=list)  # edited, replaced because of force


class EditedTutorialsError(FileExistsError):
    """The folder holds notebooks the learner changed; nothing was copied."""

    def __init__(self, folder: Path, edited: list[str]) -> None:
        self.folder, self.edited = folder, edited
        several = len(edited) != 1
        super().__init__(
            f"{', '.join(edited)} in {folder} {'differ' if several else 'differs'} from the "
            f"{'copies' if several else 'copy'} workbench made: edited, so nothing was copied; "
            "pass --force (force=True) to replace "
            f"{'them' if several else 'it'}, or choose another folder"
        )


def copy_tutorials(folder: str | Path = DEFAULT_FOLDER, *, force: bool = False) -> TutorialsCopy:
    """Copy the tutorial notebooks into ``folder`` (created if missing) and return what happened.

    Args:
        folder: where the notebooks go.
        force: replace notebooks that were edited since workbench copied them (or that it never copied).

    Raises:
        EditedTutorialsError: ``folder`` holds edited notebooks and ``force`` is False (nothing copied).
        NotADirectoryError: ``folder`` is a file.
        OSError: ``folder`` cannot be written (the message names the path).
    """
    target = Path(folder).expanduser()
    if target.exists() and not target.is_dir():
        raise NotADirectoryError(
            f"folder={str(folder)!r} is a file; give a folder to copy the tutorials into"
        )
    source = tutorials_source()
    digests = {notebook.name: _digest(notebook) for notebook in sorted(source.glob("*.ipynb"))}
    recorded = _read_manifest(target)
    result = TutorialsCopy(folder=target)
    edited: list[str] = []
    for name, digest in digests.items():
        there = _digest(target / name) if (target / name).exists() else None
        if there == digest:
            result.unchanged.append(name)
        elif there is None or recorded.get(name) == there:  # new, or untouched since copied: update it
            result.copied.append(name)
        else:
            edited.append(name)
    if edited and not force:
        raise EditedTutorialsError(target, edited)
    result.replaced = edited
    manifest = {**recorded, **digests}
    try:
        target.mkdir(parents=True, exist_ok=True)
        for name in [*result.copied, *result.replaced]:
            shutil.copyfile(source / name, target / name)
        (target / MANIFEST).write_text(
            json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
    except OSError as error:
        raise OSError(
            error.errno,
            f"cannot write {error.filename or target} ({error.strerror}); choose a folder you can write to",
        ) from error
    return result


def _read_manifest(folder: Path) -> dict[str, str]:
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in manifest.items() if isinstance(v, str)} if isinstance(manifest, dict) else {}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
