"""The store's file: made, checked and read by path, never through a descriptor of ours.

SQLite's locks are POSIX locks, held per process, and closing *any* descriptor of this
process on the database file drops them all, SQLite's included. Another connection of
this process would then write unlocked, and a process closing its last connection would
fold and delete the WAL it still writes to, losing committed transactions. So the file is
checked by path (`os.lstat`, `os.chmod`), made under another name and linked into place,
and read through SQLite alone (which catches a file that is not a database or is cut
short). `SQLiteStore.open` calls these before each connection it opens.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import sqlite3
import stat
from pathlib import Path

from .._errors import StoreError

__all__ = ["check_file", "check_pages", "create_file", "failure"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def failure(path: Path, doing: str, error: sqlite3.Error) -> StoreError:
    """The StoreError for an SQLite error; one a read-only file causes says so.

    SQLite says "unable to open database file" when it cannot make the WAL's files
    beside a store in a read-only directory, and "attempt to write a readonly
    database" for a read-only file: neither names the cause a person can fix.
    """
    name = getattr(error, "sqlite_errorname", "") or ""
    if name.startswith(("SQLITE_CANTOPEN", "SQLITE_READONLY", "SQLITE_IOERR")) and (
        _read_only(path)
    ):
        return StoreError(
            f"{path}: the store is read-only: tickloop needs to write the file "
            f"and its directory (SQLite keeps the WAL beside it, even to read) ({error})"
        )
    return StoreError(f"{path}: {doing}: {error}")


def _read_only(path: Path) -> bool:
    return not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK)


def create_file(path: Path) -> None:
    """Make a missing store file, mode 0600 from its first moment.

    The file is made under a name of its own and linked to the store's path, which
    fails when another process made the store meanwhile (then that one is used): the
    descriptor closed is one no SQLite connection can have open. Where the file system
    has no hard links, the file is made at the path itself.
    """
    if os.path.lexists(path):
        return
    fresh = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}")
    _make_file(fresh, path)
    try:
        os.link(fresh, path)
    except FileExistsError:
        pass  # another process or thread made the store first: it is the store
    except OSError:
        _make_file(path, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(fresh)


def _make_file(at: Path, store: Path) -> None:
    """Make an empty file of mode 0600 at `at`, unless one is there already."""
    try:
        descriptor = os.open(at, os.O_CREAT | os.O_EXCL | os.O_WRONLY | _NOFOLLOW | _CLOEXEC, 0o600)
    except FileExistsError:
        return
    except OSError as error:
        if isinstance(error, PermissionError) or error.errno == errno.EROFS:
            raise StoreError(
                f"{store}: cannot create the store: its directory is read-only ({error})"
            ) from error
        raise StoreError(f"{store}: cannot create the store: {error}") from error
    os.close(descriptor)


def check_file(path: Path) -> tuple[int, tuple[int, int]]:
    """Refuse anything but a regular file of this user's; give an empty one mode 0600.

    The journal holds parameters unredacted, and its decisions are acted on: a file
    someone else made (an empty file left in a shared directory) would keep it readable
    and writable to them, a symbolic link would put it elsewhere, a device (`/dev/null`)
    would be chmodded for the whole machine, and a FIFO would block the open forever. So
    the path itself is checked (`lstat`: a link is not followed) before SQLite opens it.
    An empty file is taken as a new store, so it gets a new store's mode, and failing to
    set it is an error. A file with data keeps its mode: its owner chose it. Returns the
    file's size and identity (st_dev, st_ino).
    """
    try:
        info = os.lstat(path)
    except OSError as error:
        raise StoreError(f"{path}: cannot open the store: {error.strerror or error}") from error
    if stat.S_ISLNK(info.st_mode):
        raise StoreError(f"{path}: the store is a symbolic link; give the file's own path")
    if not stat.S_ISREG(info.st_mode):
        raise StoreError(
            f"{path} is not a regular file ({_file_kind(info.st_mode)}); a store is a file "
            "of its own"
        )
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        raise StoreError(
            f"{path} is owned by another user (uid {info.st_uid}); a store holds "
            "unredacted parameters and must be its user's own file"
        )
    if info.st_size == 0 and stat.S_IMODE(info.st_mode) != 0o600:
        try:
            os.chmod(path, 0o600)  # by path: no descriptor
        except OSError as error:
            raise StoreError(
                f"{path}: cannot restrict the new store to its owner (mode 0600): {error}"
            ) from error
    return info.st_size, (info.st_dev, info.st_ino)


def check_pages(path: Path, size: int, timeout: float) -> None:
    """Refuse a store whose pages are damaged (`PRAGMA quick_check`), writing nothing.

    A file that is not SQLite, or one cut short of the pages its header counts, SQLite
    refuses as it reads the header (NOTADB, CORRUPT), before it writes anything. The
    header and the table list can be intact while a table's pages are not, which SQLite
    only notices when a statement reaches them: perhaps after a run has written to the
    file. The check runs on a connection of its own, before any connection switches to
    WAL or writes. To leave a refused file as it was: read only when a `-wal` file exists
    (closing a read-write connection would checkpoint that WAL into the file); otherwise
    read-write, since SQLite makes `-wal` and `-shm` files to read a WAL-mode database,
    and only a read-write connection removes them when it closes.
    """
    wal = Path(f"{path}-wal")
    try:
        if wal.exists():
            connection = sqlite3.connect(
                f"{path.resolve().as_uri()}?mode=ro",
                uri=True,
                timeout=timeout,
                isolation_level=None,
            )
        else:
            connection = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    except sqlite3.Error as error:
        raise failure(path, "cannot open the store", error) from error
    try:
        problems = [row[0] for row in connection.execute("PRAGMA quick_check")]
    except sqlite3.OperationalError as error:  # locked, I/O: not a verdict on the pages
        raise failure(path, "cannot read the store", error) from error
    except sqlite3.DatabaseError as error:  # so damaged that the check cannot go on
        if getattr(error, "sqlite_errorname", None) == "SQLITE_NOTADB":
            raise StoreError(f"{path} is not a tickloop store (not an SQLite database)") from None
        if getattr(error, "sqlite_errorname", None) == "SQLITE_CORRUPT" and not _nonempty(wal):
            # Refused as the header was read: the file is shorter than its pages.
            problems = [f"{error} (the file may be truncated: {size} bytes)"]
        else:
            problems = [str(error)]
    finally:
        connection.close()
    if problems != ["ok"]:
        # One line: the first report is prefixed "*** in database main ***\n".
        first = " ".join(
            line.strip() for line in problems[0].splitlines() if not line.startswith("***")
        )
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise StoreError(
            f"{path}: the store is damaged: {first}{more}; it was left as it is "
            "(the sqlite3 shell's .recover can salvage a copy)"
        )


def _nonempty(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def _file_kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"
