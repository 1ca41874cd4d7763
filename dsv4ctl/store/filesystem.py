"""Which filesystem holds the database, and so which journal it may use (issue 25).

SQLite's WAL keeps its index in a shared-memory file (-shm) that every process maps: that needs one host's memory
and working POSIX locks, so SQLite's documentation says WAL does not work over a network filesystem, and POSIX
locking on NFS, Lustre (without `flock` mounts), GPFS and CIFS is buggy or missing. On such a filesystem the store
uses a rollback journal instead, and SQLite's dot-file locking (`unix-dotfile`: a lock directory `FILE.lock` made
by mkdir, which is atomic on these filesystems), so writers (and readers) take turns. The filesystem is read from
the mount table (/proc/self/mountinfo): the mount whose point is the longest prefix of the database's real path.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")
FORCE_ENV = "DSV4CTL_SHARED_FS"  # 1: treat the database's filesystem as shared whatever the mount table says
# Filesystems where several hosts see one file, or whose locking SQLite cannot trust: NFS, Lustre, IBM Storage Scale
# (GPFS), SMB/CIFS, BeeGFS, CephFS, GlusterFS, OrangeFS, AFS, cluster block filesystems (GFS2, OCFS2), Panasas,
# WekaFS, VAST (NFS), virtual machines' 9p/virtiofs, and every FUSE filesystem (sshfs, s3fs, gcsfuse, ...).
SHARED_TYPES = frozenset({"nfs", "nfs4", "lustre", "gpfs", "cifs", "smb3", "smbfs", "beegfs", "ceph", "glusterfs",
                          "pvfs2", "orangefs", "afs", "openafs", "gfs2", "ocfs2", "panfs", "wekafs", "9p",
                          "virtiofs", "fuse", "fuseblk", "davfs", "ncpfs", "coda", "cvfs", "quobyte"})


@dataclass(frozen=True)
class Mount:
    point: str
    fstype: str
    source: str


@dataclass(frozen=True)
class Journal:
    """How the store journals a database: `wal`, or `delete` (a rollback journal) on a shared filesystem."""

    mode: str
    fstype: str | None
    mount_point: str | None
    forced: bool = False

    @property
    def shared(self) -> bool:
        return self.mode == "delete"

    def describe(self, path: Path) -> str:
        """The line `init` and the "using database" note say."""
        where = f"{self.fstype} at {self.mount_point}" if self.fstype else "filesystem unknown"
        if not self.shared:
            return f"journal WAL ({where})"
        why = f"{FORCE_ENV}=1" if self.forced else f"{where}: a shared filesystem"
        return (f"journal: rollback, not WAL ({why}); writes take turns through the lock directory "
                f"{path.name}.lock")


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)  # \040 is a space in a mount point


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a /proc/PID/mountinfo text (proc(5)), in order; lines of another shape are skipped."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 2:
            continue
        mounts.append(Mount(_unescape(fields[4]), tail[0], _unescape(tail[1])))
    return mounts


def is_shared(fstype: str) -> bool:
    return fstype in SHARED_TYPES or fstype.startswith("fuse.") or fstype.startswith("nfs")


def mount_of(path: Path, mounts: list[Mount]) -> Mount | None:
    """The mount holding `path` (the last mounted of the longest matching points: a later mount hides an
    earlier one on the same point)."""
    target = str(path)
    best: Mount | None = None
    for mount in mounts:
        point = mount.point.rstrip("/") or "/"
        inside = point == "/" or target == point or target.startswith(point + "/")
        if inside and (best is None or len(point) >= len(best.point.rstrip("/") or "/")):
            best = mount
    return best


def real_path(path: Path) -> Path:
    """The database's real path, or its nearest existing folder's for a file not created yet."""
    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe.resolve() / path.absolute().relative_to(probe) if probe != path.absolute() else probe.resolve()


def journal_for(path: Path, mountinfo: Path | None = None) -> Journal:
    """The journal the store uses for a database at `path`."""
    forced = os.environ.get(FORCE_ENV, "").strip() not in ("", "0")
    try:
        mounts = parse_mountinfo((mountinfo or MOUNTINFO).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        mounts = []  # not Linux, or /proc not mounted: SQLite's default then, unless told
    mount = mount_of(real_path(path), mounts)
    fstype, point = (mount.fstype, mount.point) if mount else (None, None)
    shared = forced or (fstype is not None and is_shared(fstype))
    return Journal("delete" if shared else "wal", fstype, point, forced and not (fstype and is_shared(fstype)))
