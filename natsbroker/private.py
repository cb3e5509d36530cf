"""Files and directories only the broker's user may read: the JetStream store,
the change feed and backups hold message data.

As nats-server (``defaultDirPerms`` 0700, ``defaultFilePerms`` 0600 in
server/filestore.go): every directory natsbroker creates there is 0700 and
every file 0600, set explicitly (``chmod``) so the process umask neither
widens nor narrows them, and without touching the umask, which belongs to
the host program when natsbroker is embedded.

LevelDB creates its own files (CURRENT, LOCK, LOG, ``*.log``, ``*.ldb``,
MANIFEST-*) 0644, at open and later at every compaction, and plyvel offers no
way to choose that mode. A stream's LevelDB directory is created 0700, which
makes the files in it unreachable for other users whatever their own mode.

Temporary files are created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` under a
unique name, then renamed over the target: a symlink or file planted under a
predictable temporary name is never written through.
"""

import os
import tempfile

DIR_PERMS = 0o700
FILE_PERMS = 0o600
TMP_SUFFIX = ".tmp"


def make_dir(path):
    """``os.mkdir`` with mode 0700 (whatever the umask)."""
    os.mkdir(path, DIR_PERMS)
    os.chmod(path, DIR_PERMS)


def make_dirs(path):
    """``os.makedirs(path, exist_ok=True)``, every directory it creates 0700
    (as nats-server's ``os.MkdirAll(dir, defaultDirPerms)``). Directories that
    exist already keep their mode."""
    path = os.path.abspath(path)
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for d in reversed(missing):
        try:
            make_dir(d)
        except FileExistsError:
            if not os.path.isdir(d):
                raise


def open_file(path, flags):
    """``os.open`` of a file that is created 0600 (an existing one is made
    0600 too); never through a symlink."""
    fd = os.open(path, flags | os.O_CLOEXEC | os.O_NOFOLLOW, FILE_PERMS)
    try:
        os.fchmod(fd, FILE_PERMS)
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_temp(path):
    """``(fd, temp_path)``: a new 0600 file next to ``path`` with a unique
    name (``<name>.<random>.tmp``), created ``O_EXCL | O_NOFOLLOW``."""
    d, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=name + ".", suffix=TMP_SUFFIX, dir=d or ".")
    os.fchmod(fd, FILE_PERMS)
    return fd, tmp


def is_temp_of(name, target):
    """True if ``name`` is a temporary file :func:`write_atomic` leaves behind
    for ``target`` (a base name) when the process dies before the rename; the
    older fixed name ``<target>.tmp`` too."""
    return name.startswith(target + ".") and name.endswith(TMP_SUFFIX)


def write_atomic(path, data, sync=True):
    """Replace ``path`` by a 0600 file holding ``data`` (bytes): written to a
    new temporary file, fsynced if ``sync``, renamed over ``path`` (and the
    directory fsynced if ``sync``)."""
    fd, tmp = create_temp(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if sync:
        dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
