"""Kernel log files, opened without following links: one way for every backend and reader.

A kernel runs as the daemon's user in its own directory, so it can replace
its ``stdout.log`` with a symbolic link to any file that user can read (or
write). Whoever opens a kernel's log (``drover logs``, the dashboard, a
backend reading a setup's stderr, a supervisor creating the file) goes
through :func:`open_log`:

* the log's directory (the kernel's own) is opened with ``O_NOFOLLOW`` and
  ``O_DIRECTORY``, and the file relative to it with ``O_NOFOLLOW``: a link in
  either place is refused, and the file cannot resolve outside that directory;
* only a regular file is read (a FIFO would block the reader, a device never end).

A refusal is :class:`UnsafeLogError`, one line naming the file and why.
Backends (local, slurm, a plugin's) and the readers share this module.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from drover.model.errors import DroverError

__all__ = ["UnsafeLogError", "create_log", "open_log", "read_log", "tail_log"]


class UnsafeLogError(DroverError, OSError):
    """A kernel's log is a link, not a regular file, or not in the kernel's directory.

    An ``OSError`` too: whoever handles a log it cannot open handles this one alike.
    """


def _directory_fd(directory: str) -> int:
    try:
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeLogError(
                f"{directory} is a symbolic link or not a directory: drover does not follow "
                "links to a kernel's logs"
            ) from None
        raise


def _opened(path: str | os.PathLike[str], flags: int, mode: int = 0o644) -> int:
    """A descriptor of ``path`` opened with ``flags`` relative to its (link-free) directory."""
    full = Path(os.path.abspath(path))
    if full.name in ("", ".", ".."):
        raise UnsafeLogError(f"{full} is not a log file's path")
    parent = _directory_fd(str(full.parent))
    try:
        return os.open(full.name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UnsafeLogError(
                f"{full} is a symbolic link: drover does not follow links in a kernel's logs "
                "(the kernel replaced its log)"
            ) from None
        raise
    finally:
        os.close(parent)


def open_log(path: str | os.PathLike[str]) -> int:
    """A read-only descriptor of the regular file ``path``, never through a link.

    Raises :class:`UnsafeLogError` for a link (of the file or of its
    directory) or anything but a regular file, and ``OSError`` as
    :func:`os.open` does (``FileNotFoundError`` for a log not there yet).
    """
    # O_NONBLOCK: opening a FIFO for reading would wait for a writer.
    fd = _opened(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafeLogError(f"{path} is not a regular file: drover reads only those as logs")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_log(path: str | os.PathLike[str]) -> int:
    """A descriptor to append to ``path`` (created if missing), never through a link.

    For whoever writes a kernel's log: a command's setup that planted a link
    named ``stdout.log`` makes this raise :class:`UnsafeLogError` instead of
    appending to the file the link names.
    """
    return _opened(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)


def read_log(path: str | os.PathLike[str], offset: int = 0, size: int = -1) -> bytes:
    """Up to ``size`` bytes (``-1``: all) of the log from ``offset``; ``b""`` if it is not there."""
    try:
        fd = open_log(path)
    except FileNotFoundError:
        return b""
    with os.fdopen(fd, "rb") as handle:
        handle.seek(offset)
        return handle.read(size)


def tail_log(path: str | os.PathLike[str], size: int) -> tuple[bytes, int] | None:
    """The last ``size`` bytes of the log and its whole size; ``None`` if it is not there."""
    try:
        fd = open_log(path)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return None
    with os.fdopen(fd, "rb") as handle:
        total = os.fstat(handle.fileno()).st_size
        handle.seek(max(0, total - size))
        return handle.read(size), total
