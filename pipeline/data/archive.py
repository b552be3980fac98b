"""Folder datasets packed in an archive (.tar, .tar.gz, .tar.xz, .zip), read in place, and the
cache of their decoded images.

An archive is read in one pass into memory (its image members' bytes; CIFAR-10's 60,000 JPEGs
are 55 MB): nothing is ever unpacked to disk, so a member's name cannot write anywhere. Names
that would escape the folder when unpacked (``..``, absolute paths), links and device files are
refused all the same: such an archive is not an ImageFolder tree. Non-image members (README,
``.DS_Store``) are skipped, as the directory reader skips non-image files.

Decoded arrays are cached in one ``.npz`` per archive, named by the archive's sha256: a
process that reads the archive again loads arrays instead of decoding every image.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import lzma
import os
import stat
import sys
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np

from pipeline.data.config import DataError, archive_suffix

# What reading a damaged archive raises, by format and compression.
READ_ERRORS = (tarfile.TarError, zipfile.BadZipFile, lzma.LZMAError, zlib.error, EOFError, OSError)
# A member as the readers give it: its name, whether it is a folder, how to read its bytes.
Member = tuple[str, bool, Callable[[], bytes]]


def is_archive(path: Path) -> bool:
    return path.is_file() and archive_suffix(path) != ""


def sha256_file(path: Path) -> str:
    """The sha256 of a file, read in 1 MiB chunks (an archive need not fit in memory twice)."""
    h = hashlib.sha256()
    try:
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as err:
        raise DataError(f"cannot read folder dataset {path} ({err})") from None
    return h.hexdigest()


@dataclass(frozen=True)
class ArchiveTree:
    """An archive's folders and image files: an ImageFolder tree that ``sources`` reads with the
    rules it reads a directory with (``subfolders``, ``images``, ``describe``)."""

    path: Path
    folders: frozenset[PurePosixPath]
    files: dict[PurePosixPath, bytes]  # the image members' contents, by normalised name
    # Where train/ and test/ (or the class folders) are: the top, or one folder wrapping them.
    root: PurePosixPath

    @classmethod
    def open(cls, path: Path, image_suffixes: set[str]) -> ArchiveTree:
        folders: set[PurePosixPath] = set()
        files: dict[PurePosixPath, bytes] = {}
        for name, is_dir, read in _members(path):
            member = _checked_name(path, name)
            if not member.parts:
                continue  # the archive's own top ("./")
            folders.update(member.parents[:-1])  # zip files often list no folders of their own
            if is_dir:
                folders.add(member)
            elif member.suffix.lower() in image_suffixes:
                files[member] = read()
        return cls(path, frozenset(folders), files, _wrapping_folder(folders))

    def describe(self, path: PurePosixPath) -> str:
        return f"{self.path} member {path}" if path.parts else str(self.path)

    def subfolders(self, folder: PurePosixPath) -> list[str]:
        return _children(self.folders, folder)

    def images(self, folder: PurePosixPath) -> list[tuple[str, io.BytesIO]]:
        """The images anywhere under ``folder``, sorted by name as the directory reader sorts its
        files, each as (what errors call it, a file to decode)."""
        depth = len(folder.parts)
        under = sorted(p for p in self.files if p.parts[:depth] == folder.parts)
        return [(self.describe(p), io.BytesIO(self.files[p])) for p in under]


def _children(folders: Iterable[PurePosixPath], folder: PurePosixPath) -> list[str]:
    return sorted(f.name for f in folders if f.parent == folder and f.parts)


def _wrapping_folder(folders: Iterable[PurePosixPath]) -> PurePosixPath:
    """The one top-level folder that wraps the tree (``cifar10/train``, ``cifar10/test``), or the
    top. A lone folder holding no folders is no wrapper but a dataset of one class: refused later
    as such."""
    top = PurePosixPath()
    tops = _children(folders, top)
    if len(tops) == 1 and tops[0] not in ("train", "test") and _children(folders, top / tops[0]):
        return top / tops[0]
    return top


def _checked_name(archive: Path, name: str) -> PurePosixPath:
    """A member's name as a relative path, refused where unpacking it would leave the folder."""
    member = PurePosixPath(name)
    if member.is_absolute() or ".." in member.parts:
        raise DataError(
            f"{archive} member {name!r} names a path outside the archive's folder; "
            "an ImageFolder archive holds only relative paths: repack it"
        )
    return member


def _members(path: Path) -> Iterator[Member]:
    """(name, is a folder, how to read its bytes) for each member, in the archive's order,
    refusing links and special files; a damaged archive is named with the member it broke at."""
    reader = _zip_members if archive_suffix(path) == ".zip" else _tar_members
    last = None
    try:
        for name, is_dir, read in reader(path):
            last = name
            yield name, is_dir, lambda read=read, name=name: _read_member(path, name, read)
    except READ_ERRORS as err:
        where = "" if last is None else f": it broke after member {last!r}"
        raise DataError(
            f"{path} is not a readable archive{where} ({type(err).__name__}: {err}); "
            "download or pack it again"
        ) from None


def _read_member(path: Path, name: str, read: Callable[[], bytes]) -> bytes:
    try:
        return read()
    # RuntimeError: an encrypted zip member; NotImplementedError: a compression zipfile lacks
    except (*READ_ERRORS, RuntimeError, NotImplementedError) as err:
        raise DataError(
            f"{path} member {name!r} cannot be read ({type(err).__name__}: {err}); "
            "the archive is damaged: download or pack it again"
        ) from None


def _not_a_file(path: Path, name: str, kind: str) -> DataError:
    return DataError(
        f"{path} member {name!r} is a {kind}; an ImageFolder archive holds only folders and "
        "image files: repack it without links or special files"
    )


def _tar_members(path: Path) -> Iterator[Member]:
    with tarfile.open(path, "r:*") as tar:
        last = None
        for info in tar:  # in order, so an .xz or .gz stream is decompressed once
            if info.issym() or info.islnk():
                raise _not_a_file(path, info.name, f"link to {info.linkname!r}")
            if not (info.isfile() or info.isdir()):
                raise _not_a_file(path, info.name, "device file, pipe or other special file")
            last = info.name
            yield info.name, info.isdir(), lambda info=info: tar.extractfile(info).read()
        # tarfile ends its listing quietly at a header cut short: a .tar cut there would lose
        # its last members unnoticed. Where the listing ended, a whole block must have been read
        # (the end-of-archive block).
        if tar.fileobj.tell() < tar.offset + tarfile.BLOCKSIZE:
            where = f"after member {last!r}" if last else "before its first member"
            raise DataError(
                f"{path} is cut short {where}: it lacks the end-of-archive block; download or pack it again"
            )


def _zip_members(path: Path) -> Iterator[Member]:
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            # The Unix file type, where the packer kept one (Windows packers and Python's
            # writestr do not: 0, a plain file).
            kind = stat.S_IFMT(info.external_attr >> 16)
            if kind == stat.S_IFLNK:
                raise _not_a_file(path, info.filename, "symbolic link")
            if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                raise _not_a_file(path, info.filename, "device file, pipe or other special file")
            yield info.filename, info.is_dir(), lambda info=info: archive.read(info)


# --- the cache of decoded arrays ----------------------------------------------------------------


def cache_file(cache_dir: Path, sha256: str) -> Path:
    return cache_dir / "archives" / f"{sha256}.npz"


def read_cache(path: Path, keys: tuple[str, ...]) -> dict[str, np.ndarray] | None:
    """The arrays ``keys`` cached at ``path``, or None when there are none. A damaged cache file
    (a disk error, a copy cut short) is deleted so that it is rebuilt, and one of another
    version's arrays is rebuilt over: either costs the decoding again, never the run."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as cached:
            if sorted(cached.files) != sorted(keys):  # another version's layout: not an error
                print(f"note: cache {path} is another version's; decoding the archive again", file=sys.stderr)
                return None
            return {key: cached[key] for key in keys}  # reading checks each array's CRC
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        print(f"warning: cache {path} is unreadable ({err}); decoding the archive again", file=sys.stderr)
        with contextlib.suppress(OSError):
            path.unlink()
        return None


def write_cache(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` whole or not at all: into a temporary file beside it, then
    renamed over it, so a reader (or a process that died mid-write) never sees half a file.
    A cache that cannot be written costs only time, so a full disk is a warning, not an error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".npz")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    except OSError as err:
        print(f"warning: cannot cache the decoded archive at {path} ({err})", file=sys.stderr)
