"""The response cache: one SQLite database (WAL), one row per request key.

Only successful responses are stored, and each is committed the moment it arrives, so a
killed run loses nothing it paid for. The key is :meth:`Request.key` (never the scorer).

Location: ``--cache PATH``, else ``$GRADETRAIL_CACHE``, else
``$XDG_CACHE_HOME/gradetrail/cache.sqlite`` (``~/.cache/gradetrail/cache.sqlite``).

What the file guarantees:

- **Integrity.** Every entry carries a checksum (SHA-256 over its key and stored text). An
  entry whose checksum or shape is wrong is never served: it is a miss, counted in
  :attr:`ResponseCache.damaged`, and the next response for its key replaces it.
  ``gradetrail cache check [--repair]`` reports (and deletes) damaged entries; a file
  whose structure is damaged is set aside by ``--repair`` (:func:`set_aside`), keeping
  every entry still readable. The checksum catches damage, not tampering: anyone who can
  write the file can change what it serves, so the cache is as trustworthy as its
  directory's permissions. Nothing under a results directory is imported into it unless
  a run on this cache signed it (:mod:`gradetrail.cache.pending`).
- **Lossless text.** A response holding text that UTF-8 cannot encode (a lone surrogate
  such as ``\\ud800`` in a provider's JSON) is stored with JSON escapes and read back
  unchanged.
- **Opening.** The file is opened without following a symlink at its name (a dangling one
  included), and refused when it has more than one hard link or is not a regular file;
  the same holds for its ``-wal``, ``-shm`` and ``-journal`` companions. A run's cache is
  written once when it is opened, so a read-only file or directory, or a full disk, is
  found before any call is paid for. Several processes may open one new file at the same
  instant: the first switch to WAL, which SQLite's busy timeout does not cover, is retried
  up to the timeout.
- **A deleted file is noticed.** If the file is deleted (or replaced) while a run has it
  open, the cache recreates it at its path with every entry this process could still
  read from the open (unlinked) file, and counts it in :attr:`ResponseCache.recreated`.
- **Claims.** A process about to call a missing key writes a claim (its host, pid, boot
  id, process start time and a heartbeat renewed every :data:`CLAIM_TTL_S` / 3 while the
  call runs); other processes sharing the cache wait for that response instead of paying
  for it again. Liveness never compares two processes' wall clocks: a claim lapses at
  once when its process is gone from this host and PID namespace (its pid is gone or
  belongs to another process, or the host rebooted since), else when the waiter has seen
  its heartbeat stand still for :data:`CLAIM_TTL_S` on the waiter's own monotonic clock
  (a holder that hung, or died on another host or in another PID namespace). Clock skew
  between processes or hosts therefore costs nothing; a holder paused for longer than
  the TTL (a suspended laptop) can be taken over, and its request is then paid twice.

Schema migration: a cache written before checksums (schema 1, no ``checksum`` column, no
``claims`` table) is upgraded the first time a writable open sees it. Each old entry that
still parses as a response gets its checksum then; one that does not keeps none and is
treated as damaged. Damage that happened before the upgrade and still parses cannot be
detected. gradetrail versions from before the upgrade refuse an upgraded cache as "not a
gradetrail cache". A cache of a newer schema than :data:`SCHEMA_VERSION` is refused, read-only
opens included, and never written.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import json
import os
import random
import sqlite3
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradetrail.cache.claims import _BOOT, _HOST, _PID_NS, CLAIM_TTL_S, Claim, Claims, _started
from gradetrail.cache.group import GroupCommit
from gradetrail.errors import CacheError, CacheRefused
from gradetrail.providers.base import Request, Response

__all__ = [
    "CLAIM_TTL_S",
    "WAL_AUTOCHECKPOINT_PAGES",
    "DAMAGED_FILE",
    "CacheCheck",
    "CacheStats",
    "Claim",
    "ResponseCache",
    "SetAside",
    "default_cache_path",
    "retry_advice",
    "set_aside",
]

#: the schema this module writes (``PRAGMA user_version``)
SCHEMA_VERSION = 2
_OLD_COLUMNS = ("key", "provider", "model", "response", "created_at")
_COLUMNS = (*_OLD_COLUMNS, "checksum")
_CLAIM_COLUMNS = ("key", "owner", "host", "pid", "expires_at")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    response TEXT NOT NULL,
    created_at REAL NOT NULL,
    checksum TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS claims (
    key TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID;
"""
#: WAL frames (pages) between automatic checkpoints, SQLite's ``wal_autocheckpoint``
#: (its default is 1,000). A cache takes about three frames a response (a random key's
#: leaf, its parents and the claims' page), so the default copied the WAL back into the
#: file every ~330 responses, rewriting the same parent and claims pages each time.
#: 8,000 frames (a WAL of up to ~33 MB, deleted when the last connection closes) writes
#: each page back once per ~2,600 responses: filling a cache takes a fifth less time,
#: with 14 % fewer write and 20 % fewer read calls (``bench/bench_sqlite.py``), for up to
#: ~70 ms more at close, when the last checkpoint copies what is left. On a disk with less
#: free space than four times that, a quarter of the free pages (``ResponseCache._wal_pages``).
WAL_AUTOCHECKPOINT_PAGES = 8000
#: the fewest WAL pages between checkpoints on a nearly full disk (``ResponseCache._wal_pages``)
MIN_WAL_PAGES = 16
_COMPANIONS = ("-wal", "-shm", "-journal")
#: the words that mark an error as a damaged file's (see ``ResponseCache._repair_hint``)
DAMAGED_FILE = "the file is damaged"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def default_cache_path() -> Path:
    """The cache file used when no ``--cache`` is given: ``$GRADETRAIL_CACHE`` or the XDG
    cache directory."""
    env = os.environ.get("GRADETRAIL_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gradetrail" / "cache.sqlite"


def checksum(key: str, text: str) -> str:
    """The checksum stored with an entry: SHA-256 hex over ``key``, a NUL and the stored
    text (UTF-8; lone surrogates passed through, so no text makes it fail)."""
    data = f"{key}\0{text}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()


def _parse(text: str) -> Response | None:
    """The response stored as ``text``, or None when it is not a well-formed response."""
    try:
        response = Response.from_json(text)
    except (ValueError, TypeError):
        return None
    if not isinstance(response.text, str):
        return None
    return response


def _valid_utf8(text: str) -> bool:
    """True when UTF-8 can encode ``text`` (no lone surrogate): ASCII text is known to be
    without encoding it (a flag of the string)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _sql_text(value: str) -> str:
    """``value`` if UTF-8 can encode it, else with unencodable characters escaped
    (``\\udc80``): SQLite text must be valid UTF-8."""
    if _valid_utf8(value):
        return value
    return value.encode("utf-8", "backslashreplace").decode("ascii", "replace")


def _stored_text(response: Response) -> str:
    """The JSON stored for ``response``: UTF-8 as is, or every non-ASCII character escaped
    when the text holds one that UTF-8 cannot encode (lossless either way)."""
    text = response.to_json()
    return text if _valid_utf8(text) else json.dumps(json.loads(text))


def _busy(exc: BaseException) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def retry_advice(error: BaseException) -> str:
    """What the line of a run stopped by the failed cache write ``error`` tells the user
    to do: free space for a full disk; for a write lock another process held past the
    busy timeout, wait for it; else make the cache writable. Each ends in running the
    same command again."""
    if _busy(error):
        return (
            "another process held the cache's write lock too long (a `gradetrail cache "
            "clear`, or a program with the file open): once it is done, run the same "
            "command again"
        )
    if "full" in str(error):
        return "free space and run the same command again"
    return "once the cache can be written, run the same command again"


@dataclass(frozen=True, slots=True, eq=False)
class CacheStats:
    """What a cache holds.

    Attributes:
        path: the database file.
        entries: number of cached responses.
        size_bytes: size of the database file (plus its WAL).
        by_model: ``(provider, model, entries)`` triples, most entries first.
    """

    path: Path
    entries: int
    size_bytes: int
    by_model: list[tuple[str, str, int]]


@dataclass(frozen=True, slots=True, eq=False)
class CacheCheck:
    """What ``gradetrail cache check`` found.

    Attributes:
        path: the database file.
        entries: entries read.
        damaged: ``(key, reason)`` of every entry that is never served (checksum mismatch,
            no checksum, not a well-formed response).
        integrity: SQLite's ``PRAGMA integrity_check`` lines (``["ok"]`` when sound).
        repaired: entries deleted by ``--repair`` (0 without it).
    """

    path: Path
    entries: int
    damaged: list[tuple[str, str]]
    integrity: list[str]
    repaired: int = 0

    @property
    def ok(self) -> bool:
        """No damaged entry and a sound file."""
        return not self.damaged and self.integrity == ["ok"]


#: what :meth:`ResponseCache.put` calls when the database cannot be written:
#: ``(key, provider, model, stored text, checksum) -> kept elsewhere``
Fallback = Callable[[str, str, str, str, str], bool]
#: a stored row: key, provider, model, response text, created_at (seconds since the
#: epoch), checksum
Entry = tuple[str, str, str, str, float, str]


class ResponseCache:
    """A SQLite response cache; safe to share across runs and processes.

    Args:
        path: the database file; its directory is created if missing (unless
            ``read_only``).
        read_only: open for reading only (``cache stats``, ``cache check``): no write is
            made, an old schema is read as it is, and a missing file is an error.
        timeout_s: how long to wait for another process's lock (SQLite's busy timeout,
            and the bound on retrying the first switch to WAL).
        monotonic: this process's monotonic clock, seconds (injected for tests): a
            claim's heartbeat standing still this long by it is what lapses a claim.
        wall: the wall clock, seconds since the epoch (injected for tests): only stamps
            entries and heartbeats, never decides liveness.

    Attributes:
        took_over: claims of another process that had lapsed (it died, or stopped
            renewing), replaced by this process's.
        recreated: times the file was found deleted or replaced and was recreated.
        rescued: entries copied into a recreated file.
        write_error: the first failed write, when a fallback is set: of a response (the
            fallback kept it) or of a claim (its call was not made).
        unsaved: responses that could not be written and were handed to the fallback.
        lost: responses that neither the database nor the fallback could keep.
        rejected: pending lines refused because no run on this cache signed them (set
            by the run, :func:`gradetrail.cache.pending.restore_pending`).
        fallback: where responses go when the database cannot be written (set by a run
            to its run directory); None to raise instead.

    Raises:
        CacheError: the file is a symlink, a hard link, not a regular file, cannot be
            opened or written, or is not a gradetrail cache.
    """

    def __init__(
        self,
        path: Path,
        *,
        read_only: bool = False,
        timeout_s: float = 30.0,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self.timeout_s = timeout_s
        self.monotonic = monotonic
        self.wall = wall
        pid = os.getpid()
        self.owner = (
            f"{_HOST}:{pid}:{_BOOT}:{_started(pid)}:{_PID_NS}:{random.getrandbits(48):012x}"
        )
        #: this process's claims on keys in flight, shared with other processes
        self.claims = Claims(self)
        #: connections to lost files whose entries went to the fallback
        self._handed_over: set[tuple[int, int]] = set()
        self._damaged: set[str] = set()
        self.took_over = 0
        self.recreated = 0
        self.rescued = 0
        self.unsaved = 0
        self.lost = 0
        self.rejected = 0
        self.write_error: CacheError | None = None
        self.fallback: Fallback | None = None
        self._has_checksums = True
        self._opened_at = wall()
        self._db, self._identity = self._connect()
        #: claims and responses waiting for the next grouped transaction
        self.group = GroupCommit(self)

    # ------------------------------------------------------------------ opening

    def _failed(self, what: str, exc: Exception) -> CacheError:
        """The error for a failed ``what`` (read or write); for a damaged file it names
        the command that sets the file aside and keeps what is readable."""
        text = f"cache {self.path}: {what} failed ({_reason(exc)})"
        if _damaged_file(exc):
            text += f"; {self._repair_hint()}"
        return CacheError(text)

    def _repair_hint(self) -> str:
        """What a damaged file's error says to do (``cache check --repair`` recognizes an
        error as a damaged file's by it)."""
        return (
            f"{DAMAGED_FILE}: `gradetrail cache check --repair --cache {self.path}` sets it "
            "aside and keeps every entry still readable"
        )

    def _refuse(self, what: str) -> CacheRefused:
        return CacheRefused(f"cache {self.path}: {what}; pass another --cache PATH or --no-cache")

    def _check_names(self) -> None:
        """Refuse a symlink, a hard link or a non-regular file at the path or a companion."""
        for suffix in ("", *_COMPANIONS):
            name = Path(f"{self.path}{suffix}")
            try:
                st = os.lstat(name)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise self._refuse(f"cannot open ({exc.strerror})") from None
            what = f"{name.name} " if suffix else ""
            if stat.S_ISLNK(st.st_mode):
                raise self._refuse(
                    f"{what}is a symlink (to {os.readlink(name)}); the cache is never opened "
                    "through a link"
                )
            if not stat.S_ISREG(st.st_mode):
                raise self._refuse(f"{what}is not a regular file")
            if st.st_nlink > 1:
                raise self._refuse(f"{what}has {st.st_nlink} hard links (one is allowed)")

    def _pin(self) -> tuple[int, int]:
        """Open (creating) the file without following links; return its (device, inode)."""
        flags = (os.O_RDONLY if self.read_only else os.O_RDWR | os.O_CREAT) | _NOFOLLOW
        try:
            fd = os.open(self.path, flags | _NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self._refuse(
                    "is a symlink; the cache is never opened through a link"
                ) from None
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and not self.read_only:
                raise self._refuse(f"not writable ({exc.strerror})") from None
            raise self._refuse(f"cannot open ({exc.strerror})") from None
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        if not stat.S_ISREG(st.st_mode):
            raise self._refuse("is not a regular file")
        if st.st_nlink > 1:
            raise self._refuse(f"has {st.st_nlink} hard links (one is allowed)")
        return st.st_dev, st.st_ino

    def _connect(self) -> tuple[sqlite3.Connection, tuple[int, int]]:
        if self.read_only and not self.path.is_file():
            raise self._refuse("not found")
        try:
            if not self.read_only:
                self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._refuse(f"cannot create its directory ({exc.strerror})") from None
        self._check_names()
        identity = self._pin()
        try:
            return self._open("?mode=ro" if self.read_only else "", identity), identity
        except sqlite3.Error as exc:
            # read-only, a WAL file in a directory or filesystem this process cannot
            # write: SQLite cannot make its -shm file and refuses to open it. With no -wal
            # left, the file holds every entry and nobody can change it under this
            # process, so it is read as it is (immutable)
            if not (
                self.read_only
                and "unable to open" in str(exc)
                and not os.path.lexists(f"{self.path}-wal")
            ):
                raise self._open_error(exc) from None
        try:
            return self._open("?mode=ro&immutable=1", identity), identity
        except sqlite3.Error as exc:
            raise self._open_error(exc) from None

    def _open(self, query: str, identity: tuple[int, int]) -> sqlite3.Connection:
        """A connection to the file pinned as ``identity`` (URI ``query``), checked and set
        up (:meth:`_init`).

        Raises:
            sqlite3.Error: SQLite could not open, read or set it up (see :meth:`_open_error`).
            CacheRefused: it was replaced meanwhile, or is not a gradetrail cache.
        """
        db = sqlite3.connect(
            self.path.resolve().as_uri() + query,
            uri=True,
            timeout=self.timeout_s,
            isolation_level=None,
        )
        try:
            st = os.stat(self.path, follow_symlinks=False)
            if (st.st_dev, st.st_ino) != identity:
                raise self._refuse("was replaced while it was being opened")
            db.create_function("gt_checksum", 2, checksum, deterministic=True)
            db.create_function("gt_valid", 1, lambda t: _parse(t) is not None)
            self._retrying_busy(lambda: self._init(db))
        except BaseException:
            db.close()
            raise
        return db

    def _open_error(self, exc: sqlite3.Error) -> CacheRefused:
        """The one line for a file SQLite could not open, read or set up."""
        if "readonly" in str(exc) or "unable to open" in str(exc):
            return self._refuse(f"{'unreadable' if self.read_only else 'not writable'} ({exc})")
        if "malformed" in str(exc):
            return CacheRefused(
                f"cache {self.path}: cannot open ({exc}); {self._repair_hint()}, or pass "
                "another --cache PATH or --no-cache"
            )
        if _busy(exc):
            return CacheRefused(
                f"cache {self.path}: cannot open ({exc}); {retry_advice(exc)}, or pass "
                "another --cache PATH or --no-cache"
            )
        return self._refuse(f"cannot open ({exc})")

    def _retrying_busy(self, step: Callable[[], None]) -> None:
        """Run ``step``, again while it fails with ``database is locked`` (up to the busy
        timeout): a new file's first switch to WAL returns that at once, without waiting."""
        deadline = time.monotonic() + self.timeout_s
        delay = 0.002
        while True:
            try:
                return step()
            except sqlite3.OperationalError as exc:
                if not _busy(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.2)

    def _init(self, db: sqlite3.Connection) -> None:
        """Check the schema, switch to WAL and upgrade the schema (writable opens), with
        one real write so an unwritable file or a full disk is found now."""
        columns = self._check_schema(db)
        if self.read_only:
            self._has_checksums = "checksum" in columns
            if not columns:  # a file no open has written yet (created empty, or its first
                # open killed before the schema): an empty cache, its tables temporary
                for statement in _SCHEMA.split(";")[:-1]:
                    db.execute(statement.replace("CREATE TABLE", "CREATE TEMP TABLE"))
                self._has_checksums = True
            return
        if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(f"PRAGMA wal_autocheckpoint={self._wal_pages(db)}")
        db.execute("BEGIN IMMEDIATE")
        try:
            columns = self._check_schema(db)
            if columns and "checksum" not in columns:
                db.execute("ALTER TABLE responses ADD COLUMN checksum TEXT")
                db.execute(
                    "UPDATE responses SET checksum = gt_checksum(key, response) "
                    "WHERE gt_valid(response)"
                )
            for statement in _SCHEMA.split(";")[:-1]:  # executescript would COMMIT
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")  # the write that proves it
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def _wal_pages(self, db: sqlite3.Connection) -> int:
        """The WAL's pages between checkpoints for this open: :data:`WAL_AUTOCHECKPOINT_PAGES`,
        or a quarter of the pages free on the file's disk when that is fewer (at least
        :data:`MIN_WAL_PAGES`). A WAL is only copied back once it is that long, so on a
        disk with less free space than that it filled the disk first: the run stopped
        for a full disk with the cache's own entries a fraction of it, and every later
        run did again, never reaching the checkpoint."""
        try:
            st = os.statvfs(self.path.parent)
        except OSError:
            return WAL_AUTOCHECKPOINT_PAGES
        (page_size,) = db.execute("PRAGMA page_size").fetchone()
        free_pages = st.f_bavail * st.f_frsize // page_size
        return max(MIN_WAL_PAGES, min(WAL_AUTOCHECKPOINT_PAGES, free_pages // 4))

    def _check_schema(self, db: sqlite3.Connection) -> set[str]:
        """Refuse a database written by a newer gradetrail (a schema above
        :data:`SCHEMA_VERSION`: read, or marked as this one's, it would be misread or
        downgraded) or that holds anything but gradetrail's tables; return the columns of
        ``responses`` (empty for a new file)."""
        (version,) = db.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise CacheRefused(
                f"cache {self.path}: written by a newer gradetrail (schema {version}; this "
                f"one reads up to {SCHEMA_VERSION}); upgrade gradetrail or pass another "
                "--cache PATH"
            )
        tables = {
            name
            for (name,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        }
        columns = {row[1] for row in db.execute("PRAGMA table_info(responses)")}
        claims = {row[1] for row in db.execute("PRAGMA table_info(claims)")}
        if (
            tables - {"responses", "claims"}
            or (columns and columns not in (set(_COLUMNS), set(_OLD_COLUMNS)))
            or (claims and claims != set(_CLAIM_COLUMNS))
        ):
            raise CacheRefused(
                f"cache {self.path}: not a gradetrail cache (it holds other tables or "
                "columns); pass another --cache PATH"
            )
        return columns

    # ------------------------------------------------------------------ the file itself

    def still_there(self) -> bool:
        """True when the path still names the file this cache has open."""
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._identity

    def ensure_file(self) -> bool:
        """Recreate the file if it was deleted or replaced since it was opened, copying
        every entry still readable from the open (unlinked) file into it. Returns True
        when it recreated it.

        When it cannot be recreated (its disk is full, a directory took its place), the
        entries written since this cache was opened, still readable from the open file,
        are handed to :attr:`fallback` (once per lost file) and counted in
        :attr:`unsaved` (and in :attr:`lost` when the fallback cannot keep them either),
        so nothing this run paid for dies with the deleted file.

        Raises:
            CacheError: the new file cannot be created (see the constructor).
        """
        if self.read_only or self.still_there():
            return False
        old, lost_file = self._db, self._identity
        rows = []
        with contextlib.suppress(sqlite3.Error):  # what cannot be read is requested again
            rows = old.execute(
                "SELECT key, provider, model, response, created_at, checksum FROM responses"
            ).fetchall()
        with contextlib.suppress(sqlite3.Error):
            # move the lost file's WAL into it and empty the WAL: a -wal left at the path
            # would otherwise be replayed onto whatever file is put there (a stale copy
            # put back), leaving it malformed for every later run
            old.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        try:
            self._db, self._identity = self._connect()
        except CacheError:
            self._hand_over(old, lost_file)  # the old file stays open: a later call may recreate it
            raise
        try:
            with self._write():
                self._db.executemany(
                    "INSERT OR IGNORE INTO responses VALUES (?, ?, ?, ?, ?, ?)", rows
                )
        except sqlite3.Error as exc:
            self._hand_over(old, lost_file)
            raise self._failed("write", exc) from None
        finally:
            old.close()
        self.recreated += 1
        self.rescued += len(rows)
        return True

    def _hand_over(self, old: sqlite3.Connection, lost_file: tuple[int, int]) -> None:
        """Hand the entries written to the lost file ``old`` (device and inode
        ``lost_file``) since this cache was opened to :attr:`fallback`, once per file,
        counting them in :attr:`unsaved` and, when they cannot be kept, in :attr:`lost`."""
        if lost_file in self._handed_over:
            return
        self._handed_over.add(lost_file)
        try:
            rows = old.execute(
                "SELECT key, provider, model, response, checksum FROM responses "
                "WHERE created_at >= ?",
                (self._opened_at,),
            )
            for key, provider, model, text, check in rows:
                self.unsaved += 1
                if self.fallback is None or not self.fallback(key, provider, model, text, check):
                    self.lost += 1
        except sqlite3.Error:  # unreadable: nothing more can be saved from it
            pass

    # ------------------------------------------------------------------ entries

    def get(self, key: str) -> Response | None:
        """The cached response for ``key``, or None (a damaged entry counts as none: it
        is counted in :attr:`damaged`, never served)."""
        try:
            row = self._db.execute(self._select_one, (key,)).fetchone()
        except sqlite3.Error as exc:
            raise self._failed("read", exc) from None
        if row is None:
            return None
        return self._verified(key, row[0], row[1])

    @property
    def _select_one(self) -> str:
        column = "checksum" if self._has_checksums else "NULL"
        return f"SELECT response, {column} FROM responses WHERE key = ?"

    def _verified(self, key: str, text: str, stored: str | None) -> Response | None:
        if not isinstance(text, str) or stored != checksum(key, text):
            self._damaged.add(key)
            return None
        response = _parse(text)
        if response is None:
            self._damaged.add(key)
        return response

    @property
    def damaged(self) -> int:
        """Distinct keys found damaged (and not served) since the cache was opened."""
        return len(self._damaged)

    def get_many(self, keys: Sequence[str]) -> dict[str, Response]:
        """The cached responses among ``keys``, by key: one query per 500 keys instead of
        one per key. Keys not cached, and damaged entries (counted in :attr:`damaged`, as
        :meth:`get` counts them), are left out."""
        found: dict[str, Response] = {}
        try:
            for key, text, stored in self.select_in(self.select_entries, keys):
                response = self._verified(key, text, stored)
                if response is not None:
                    found[key] = response
        except sqlite3.Error as exc:
            raise self._failed("read", exc) from None
        return found

    @property
    def select_entries(self) -> str:
        """``SELECT key, response, checksum FROM responses WHERE key IN`` (NULL for the
        checksum of a cache from before checksums), for :meth:`select_in`."""
        column = "checksum" if self._has_checksums else "NULL"
        return f"SELECT key, response, {column} FROM responses WHERE key IN"

    def select_in(self, sql: str, keys: Sequence[str]) -> Iterator[tuple[Any, ...]]:
        """The rows of ``sql`` (a query ending in ``key IN``) for ``keys``, 500 keys a
        query (SQLite's bound on a statement's parameters).

        Raises:
            sqlite3.Error: a query failed (the caller says what it was for).
        """
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            yield from self._db.execute(f"{sql} ({','.join('?' * len(chunk))})", chunk).fetchall()

    def any_missing(self, keys: Iterable[str]) -> bool:
        """True when at least one of ``keys`` has no cached response (500 keys a query,
        taken from ``keys`` as they come: a generator is never held whole; damaged entries
        count as present here and as misses when read). Keys in sorted order read about
        four times faster: neighbours share the table's pages, which SQLite reads once."""
        it = iter(keys)
        try:
            while chunk := list(itertools.islice(it, 500)):
                marks = ",".join("?" * len(chunk))
                (found,) = self._db.execute(
                    f"SELECT COUNT(*) FROM responses WHERE key IN ({marks})", chunk
                ).fetchone()
                if found < len(set(chunk)):
                    return True
        except sqlite3.Error as exc:
            raise self._failed("read", exc) from None
        return False

    def put(self, key: str, request: Request, response: Response) -> None:
        """Store a successful response (committed at once) and drop this process's claim
        on ``key``.

        When the database cannot be written (a full disk, say) and :attr:`fallback` is
        set, the response is handed to it instead and the failure is kept in
        :attr:`write_error`; the caller stops starting new calls.

        Raises:
            CacheError: the write failed and there is no fallback.
        """
        self.write_one(self.prepared(key, request, response))

    def store(self, key: str, provider: str, model: str, text: str, check: str) -> None:
        """Store one entry as :meth:`put` does, given its stored text and checksum (from a
        fallback file, say).

        Raises:
            CacheError: the write failed and there is no fallback.
        """
        self.write_one(self.entry(key, provider, model, text, check))

    def write_one(self, row: Entry) -> None:
        """Write ``row`` in a transaction of its own, as :meth:`put` does (with its
        fallback).

        Raises:
            CacheError: the write failed and there is no fallback.
        """
        if self.stuck:
            self._keep_elsewhere(row, self.write_error)
            return
        try:
            self.ensure_file()
            with self._write():
                self.write_entries([row])
        except (sqlite3.Error, CacheError) as exc:
            self._keep_elsewhere(row, exc)

    def note_busy(self, exc: BaseException) -> None:
        """When ``exc`` is a write that waited :attr:`timeout_s` for another process's
        write lock in vain, and a run holds this cache (:attr:`fallback`), keep it as
        :attr:`write_error`: the cache is then :attr:`stuck`."""
        if self.fallback is not None and _busy(exc) and self.write_error is None:
            self.write_error = self._failed("write", exc)

    @property
    def stuck(self) -> bool:
        """True once a write of this run failed because another process held the write
        lock past :attr:`timeout_s`: later writes are not tried (each would wait as long
        again, one after another, however long that process holds it): responses go to
        :attr:`fallback`, claims fail, renewals are skipped, and the run, which stops
        starting samples at the first failure, ends after its calls in flight land."""
        return self.write_error is not None and _busy(self.write_error)

    def entry(self, key: str, provider: str, model: str, text: str, check: str) -> Entry:
        """The row :meth:`write_entries` stores for one response (stamped now)."""
        return (key, _sql_text(provider), _sql_text(model), text, self.wall(), check)

    def prepared(self, key: str, request: Request, response: Response) -> Entry:
        """The row :meth:`put` stores for ``response`` (its text and checksum)."""
        text = _stored_text(response)
        return self.entry(key, request.provider, request.model, text, checksum(key, text))

    def write_entries(self, rows: Sequence[Entry]) -> None:
        """Write ``rows`` and drop this process's claims on their keys, inside a write
        transaction the caller holds (:meth:`_write`): two statements for any number of
        rows.

        Raises:
            sqlite3.Error: the write failed (the caller rolls back and decides).
        """
        self._db.executemany("INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?)", rows)
        self._db.executemany(
            "DELETE FROM claims WHERE key = ? AND owner = ?", [(r[0], self.owner) for r in rows]
        )

    def _keep_elsewhere(self, row: Entry, exc: BaseException) -> None:
        """A failed write of ``row``: hand it to :attr:`fallback` (counted in
        :attr:`unsaved`, and in :attr:`lost` when the fallback cannot keep it either).

        Raises:
            CacheError: there is no fallback.
        """
        error = self._failed("write", exc)
        if self.fallback is None:
            raise error from None
        self.write_error = self.write_error or error
        self.unsaved += 1
        if not self.fallback(*row[:4], row[5]):
            self.lost += 1

    # ------------------------------------------------------------------ claims

    def claim(self, key: str) -> Response | Claim | None:
        """See :meth:`gradetrail.cache.claims.Claims.claim`."""
        return self.claims.claim(key)

    def holder(self, key: str) -> Claim | None:
        """See :meth:`gradetrail.cache.claims.Claims.holder`."""
        return self.claims.holder(key)

    def renew(self, key: str) -> None:
        """See :meth:`gradetrail.cache.claims.Claims.renew`."""
        self.claims.renew(key)

    def release(self, key: str) -> None:
        """See :meth:`gradetrail.cache.claims.Claims.release`."""
        self.claims.release(key)

    def _write(self) -> _Transaction:
        return _Transaction(self._db)

    # ------------------------------------------------------------------ maintenance

    def stats(self) -> CacheStats:
        """See :func:`gradetrail.cache.maintenance.cache_stats`."""
        from gradetrail.cache.maintenance import cache_stats

        return cache_stats(self)

    def entries(self) -> Iterator[tuple[str, object, object]]:
        """Every entry's ``(key, response text, checksum)``, as stored (read-only)."""
        column = "checksum" if self._has_checksums else "NULL"
        yield from self._db.execute(f"SELECT key, response, {column} FROM responses")

    def check(self, *, repair: bool = False) -> CacheCheck:
        """See :func:`gradetrail.cache.maintenance.check_cache`."""
        from gradetrail.cache.maintenance import check_cache

        return check_cache(self, repair=repair)

    def clear(self, model: str | None = None) -> int:
        """See :func:`gradetrail.cache.maintenance.clear_cache`; returns the entries
        deleted."""
        from gradetrail.cache.maintenance import clear_cache

        return clear_cache(self, model).deleted

    def close(self) -> None:
        """Write what waits for a grouped transaction, drop this process's remaining
        claims and close the connection."""
        if not self.read_only:
            self.group.flush()
            self.claims.drop_all()
        self._db.close()


@dataclass(frozen=True, slots=True, eq=False)
class SetAside:
    """What :func:`set_aside` did.

    Attributes:
        path: the cache file (new, holding the entries kept).
        aside: where the damaged file went.
        kept: entries read from it (its main part and its write-ahead log) that verified
            their checksum, now in the new file.
        unreadable: True when reading stopped at damage (entries past it are lost and
            requested again).
    """

    path: Path
    aside: Path
    kept: int
    unreadable: bool


def set_aside(path: Path, *, now: Callable[[], float] = time.time) -> SetAside:
    """Move a damaged cache file aside (``<name>.damaged-<UTC time>``, its ``-wal`` and
    ``-shm`` beside it under names SQLite never opens), make a new cache at ``path`` and
    copy into it every entry still readable whose checksum verifies: from the damaged
    file's main part, and from the file as its write-ahead log leaves it (the entries of
    the last transactions before the damage live only there until a checkpoint, up to
    :data:`WAL_AUTOCHECKPOINT_PAGES` pages of them; read through hard links in a
    temporary directory beside it, read-only, so neither file changes).

    Raises:
        CacheError: the file cannot be moved, or the new cache cannot be written.
    """
    path = Path(path)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now()))
    aside = path.with_name(f"{path.name}.damaged-{stamp}")
    try:
        if os.path.lexists(aside):
            raise FileExistsError(errno.EEXIST, "a set-aside file of this second exists")
        os.rename(path, aside)
        for suffix in _COMPANIONS:
            with contextlib.suppress(FileNotFoundError):
                os.rename(f"{path}{suffix}", f"{aside}.set-aside{suffix}")
    except OSError as exc:
        raise CacheError(f"cache {path}: cannot set it aside ({exc.strerror})") from None
    rows: list[tuple[object, ...]] = []
    unreadable = _salvage_file(f"{aside.resolve().as_uri()}?mode=ro&immutable=1", rows)
    wal = Path(f"{aside}.set-aside-wal")
    if wal.is_file() and wal.stat().st_size > 0:
        _salvage_wal(aside, wal, rows)
    cache = ResponseCache(path)
    try:
        with cache._write():
            kept = cache._db.executemany(
                "INSERT OR IGNORE INTO responses VALUES (?, ?, ?, ?, ?, ?)", rows
            ).rowcount
    except sqlite3.Error as exc:
        raise cache._failed("write", exc) from None
    finally:
        cache.close()
    return SetAside(path, aside, kept, unreadable)


def _salvage_file(uri: str, rows: list[tuple[object, ...]]) -> bool:
    """:func:`_salvage` of the database at ``uri`` (opened read-only); True when some
    entries could not be read (or none could: it would not open)."""
    try:
        db = sqlite3.connect(uri, uri=True)
        try:
            return _salvage(db, rows)
        finally:
            db.close()
    except sqlite3.Error:
        return True


def _salvage_wal(aside: Path, wal: Path, rows: list[tuple[object, ...]]) -> None:
    """Append to ``rows`` the verified entries readable from the damaged file ``aside`` as
    its write-ahead log ``wal`` leaves it: both hard-linked under the names SQLite pairs
    in a temporary directory beside them, opened read-only (SQLite replays the log into
    its own index, never into either file). Where hard links cannot be made, nothing is
    read from the log (its entries are requested again)."""
    import tempfile  # repairs only: not on a run's path

    with tempfile.TemporaryDirectory(prefix=".gradetrail-salvage-", dir=aside.parent) as tmp:
        linked = Path(tmp) / "cache.sqlite"
        try:
            os.link(aside, linked)
            os.link(wal, f"{linked}-wal")
        except OSError:
            return
        _salvage_file(f"{linked.resolve().as_uri()}?mode=ro", rows)


def _salvage(db: sqlite3.Connection, rows: list[tuple[object, ...]]) -> bool:
    """Append to ``rows`` every entry of the damaged file ``db`` that can still be read and
    verifies its checksum, in key order; return True when some could not be read.

    A file cut short says it has more pages than it holds, which SQLite refuses before
    reading anything unless ``writable_schema`` is on (the connection is read-only all
    the same). Reading stops where a missing or damaged page sits in the key order; the
    walk then goes on from the next of the 4,096 three-hex-digit key prefixes (keys are
    SHA-256 hex), so a damaged page loses the entries it held and those of at most one
    prefix around it, not every entry after it.
    """
    db.execute("PRAGMA writable_schema = ON")
    sql = (
        "SELECT key, provider, model, response, created_at, checksum FROM responses "
        "WHERE key > ? ORDER BY key"
    )
    last, damaged = "", False
    while True:
        try:
            for row in db.execute(sql, (last,)):
                key, text, check = row[0], row[3], row[5]
                if isinstance(key, str) and isinstance(text, str) and check == checksum(key, text):
                    rows.append(row)
                if isinstance(key, str):
                    last = key
            return damaged
        except sqlite3.Error:
            damaged = True
        try:
            prefix = int(last[:3].ljust(3, "0"), 16) + 1
        except ValueError:  # not a key gradetrail wrote: nothing more to find past it
            return True
        if prefix >= 16**3:
            return True
        last = f"{prefix:03x}"


def _damaged_file(exc: BaseException) -> bool:
    """True when SQLite says the file itself is damaged (not busy, full or read-only)."""
    text = str(exc)
    return "malformed" in text or "not a database" in text


def _reason(exc: Exception) -> str:
    text = str(exc)
    prefix = "write failed ("
    if prefix in text:  # a CacheError from recreating the file: its reason only
        return text.split(prefix, 1)[1].rsplit(")", 1)[0]
    return text


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (rolled back on an error): the write lock is taken
    first, so a read-then-write decision cannot race another process."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, *rest: object) -> None:
        if kind is None:
            self._db.execute("COMMIT")
        elif self._db.in_transaction:
            self._db.execute("ROLLBACK")
