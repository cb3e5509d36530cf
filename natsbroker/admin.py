"""``natsbroker-admin``: back up and restore JetStream streams over the network,
verify and repair a stopped server's file store.

    natsbroker-admin backup STREAM DIR [--server URL]
    natsbroker-admin restore DIR [--server URL] [--stream NAME]
    natsbroker-admin verify DIR                     (a backup directory)
    natsbroker-admin verify STORE_DIR [--stream NAME] [--json]
    natsbroker-admin repair STORE_DIR (--stream NAME | --all) [--yes] [--json]

``verify`` tells a backup directory (``backup.json``/``manifest.json`` in it)
from a store; store checks and repairs are :mod:`natsbroker.store.fsck`'s.
Exit status: 0 all verifies, 1 damage found (or an operation failed), 2 usage
errors and a store in use by a running server.

``backup`` asks the server for a snapshot (``$JS.API.STREAM.SNAPSHOT``),
receives its chunks (acknowledging each one: the server's flow control) and
writes the directory the ``nats`` CLI writes:

    DIR/backup.json      {"config": ..., "state": ...} as the server sent them
    DIR/stream.tar.s2    the snapshot bytes as received (natsbroker's own
                         format from natsbroker, an s2 tar from nats-server;
                         the name is the CLI's so either tool can restore it)
    DIR/manifest.json    what this tool adds: format, size, chunks, SHA-256

then reads the file back and checks it (SHA-256; for natsbroker snapshots also
every record's CRC and the snapshot's own digest). ``restore`` checks the
directory the same way *before* sending anything, then sends the file to
``$JS.API.STREAM.RESTORE`` chunk by chunk, each chunk waiting for the server's
acknowledgement, and reports the server's final answer. A progress bar
(bytes, chunks, rate; tqdm) goes to stderr when it is a terminal; elsewhere
only the final summary line is printed. ``verify`` and ``repair`` show one too.

It talks to the server with nats-py (``pip install nats-py``). Backing up a
nats-server stream works (the data is nats-server's own format: restore it to
a nats-server); natsbroker restores only natsbroker snapshots.
"""

import argparse
import asyncio
import datetime
import hashlib
import json
import os
import sys
import time

from natsbroker import private

DATA_FILE = "stream.tar.s2"
META_FILE = "backup.json"
MANIFEST_FILE = "manifest.json"
FORMAT_NATSBROKER = "natsbroker"
FORMAT_NATS_SERVER = "nats-server"
S2_MAGIC = b"\xff\x06\x00\x00S2sTwO"
SNAPPY_MAGIC = b"\xff\x06\x00\x00sNaPpY"
DEFAULT_SERVER = "nats://127.0.0.1:4222"
DEFAULT_CHUNK = 128 * 1024


class AdminError(Exception):
    """A failure to report (no traceback)."""


class UsageError(AdminError):
    """Exit status 2: the command line names nothing this tool can work on."""


# -- progress ------------------------------------------------------------------

def _size(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024.0


def _on_terminal(out):
    return hasattr(out, "isatty") and out.isatty()


class Progress:
    """A progress bar (tqdm) on stderr: bytes (of the expected total when
    known), chunks, rate; drawn only on a terminal, silent otherwise (logs
    and pipes get the one-line summary each command prints at its end)."""

    def __init__(self, label, total=0, out=None, quiet=False, chunks=True, estimate=False):
        from tqdm import tqdm
        self.label = label
        self.show_chunks = chunks
        self.estimate = estimate  # the total is the server's estimate, not a size
        self.final_rate = None
        self.total = total
        self.out = out or sys.stderr
        self.bytes = 0
        self.chunks = 0
        self.start = time.monotonic()
        self.bar = tqdm(desc=label, total=total or None, file=self.out, unit="B",
                        unit_scale=True, unit_divisor=1024, leave=True, dynamic_ncols=True,
                        disable=quiet or not _on_terminal(self.out))

    def update(self, nbytes, chunks=1):
        self.bytes += nbytes
        self.chunks += chunks
        if self.estimate and self.bar.total is not None and self.bytes > self.bar.total:
            self.bar.total = self.bytes  # the estimate was low: no bar past 100%
        if self.show_chunks:
            self.bar.set_postfix_str("%d chunk%s" % (self.chunks, "" if self.chunks == 1 else "s"),
                                     refresh=False)
        self.bar.update(nbytes)

    def rate(self):
        dt = time.monotonic() - self.start
        return self.bytes / dt if dt > 0 else 0.0

    def finish(self):
        self.final_rate = self.rate()
        if self.bar.total is not None and self.bytes != self.bar.total:
            self.bar.total = self.bytes  # ends at 100%: what there was
            self.bar.refresh()
        self.bar.close()


def _steps(items, label, unit, out=None, quiet=False):
    """``items`` with a progress bar of one step each (on a terminal only)."""
    from tqdm import tqdm
    out = out or sys.stderr
    return tqdm(items, desc=label, unit=unit, file=out, leave=False,
                disable=quiet or not _on_terminal(out))


def _say(bar, text, out):
    """Print ``text`` to ``out`` without tearing the bar drawn on the same terminal."""
    from tqdm import tqdm
    if getattr(bar, "disable", True):
        print(text, file=out)
    else:
        tqdm.write(text, file=out)


# -- files ---------------------------------------------------------------------

def _format_of(head):
    from natsbroker.store.snapfile import MAGIC
    if head.startswith(MAGIC):
        return FORMAT_NATSBROKER
    if head.startswith(S2_MAGIC) or head.startswith(SNAPPY_MAGIC):
        return FORMAT_NATS_SERVER
    return "unknown"


def check_data(path, manifest=None, progress=None):
    """Read the data file once: SHA-256, size, and for natsbroker snapshots
    the full structural check. Compares with ``manifest`` when given.
    Returns ``(sha256 hex, size, format, reader or None)``."""
    from natsbroker.store.snapfile import Reader, SnapshotError
    sha = hashlib.sha256()
    size = 0
    reader = None
    fmt = None
    try:
        f = open(path, "rb")
    except OSError as e:
        raise AdminError("cannot read %s: %s" % (path, e.strerror or e)) from None
    with f:
        while True:
            block = f.read(1 << 20)
            if not block:
                break
            if fmt is None:
                fmt = _format_of(block[:16])
                if fmt == FORMAT_NATSBROKER:
                    reader = Reader()
            sha.update(block)
            size += len(block)
            if reader is not None:
                try:
                    reader.feed(block)
                except SnapshotError as e:
                    raise AdminError("%s: %s" % (path, e)) from None
            if progress is not None:
                progress.update(len(block), 0)
    if reader is not None:
        try:
            reader.finish()
        except SnapshotError as e:
            raise AdminError("%s: %s" % (path, e)) from None
    digest = sha.hexdigest()
    if manifest is not None:
        if manifest.get("size") is not None and manifest["size"] != size:
            raise AdminError("%s: size %d, the manifest says %d: the backup is damaged"
                             % (path, size, manifest["size"]))
        if manifest.get("sha256") and manifest["sha256"] != digest:
            raise AdminError("%s: SHA-256 %s, the manifest says %s: the backup is damaged"
                             % (path, digest, manifest["sha256"]))
    return digest, size, fmt or "empty", reader


def _read_json(path, what):
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        raise AdminError("%s: no %s (not a backup directory?)" % (os.path.dirname(path) or ".", what)) from None
    except OSError as e:
        raise AdminError("cannot read %s: %s" % (path, e.strerror or e)) from None
    except ValueError as e:
        raise AdminError("%s: not valid JSON (%s)" % (path, e)) from None


def _write_json(path, value):
    # 0600, through a new temporary file: a backup holds message data.
    private.write_atomic(path, (json.dumps(value, indent=2) + "\n").encode())


# -- talking to the server -------------------------------------------------------

def _nats():
    try:
        import nats
    except ImportError:
        raise AdminError("nats-py is required: pip install nats-py") from None
    return nats


async def _connect(url, timeout):
    nats = _nats()
    errors = []

    async def note(e):
        errors.append(e)
    try:
        # max_reconnect_attempts=0 would make nats-py retry the first connect
        # forever: 1 gives up after a second failure.
        return await asyncio.wait_for(nats.connect(
            servers=[url], connect_timeout=timeout, allow_reconnect=False,
            max_reconnect_attempts=1, reconnect_time_wait=0.1, error_cb=note,
            name="natsbroker-admin"), timeout * 2 + 1)
    except Exception as e:
        cause = errors[-1] if errors else e
        if isinstance(e, asyncio.TimeoutError) and not errors:
            cause = "timed out"
        raise AdminError("cannot connect to %s: %s" % (url, _describe(cause))) from None


def _describe(e):
    text = str(e) or e.__class__.__name__
    return text.replace("nats: ", "")


async def _api(nc, subject, body, timeout, what):
    """A JetStream API request; returns the decoded response or raises AdminError."""
    nats = _nats()
    try:
        msg = await nc.request(subject, json.dumps(body).encode(), timeout=timeout)
    except nats.errors.NoRespondersError:
        raise AdminError("%s: no JetStream at the server (no responders on %s)"
                         % (what, subject)) from None
    except nats.errors.TimeoutError:
        raise AdminError("%s: no answer from the server in %gs" % (what, timeout)) from None
    return _decode(msg.data, what)


def _decode(data, what):
    try:
        resp = json.loads(data)
    except ValueError:
        text = data[:200].decode(errors="replace")
        raise AdminError("%s: unexpected answer %r" % (what, text)) from None
    if not isinstance(resp, dict):
        raise AdminError("%s: unexpected answer %r" % (what, data[:200]))
    err = resp.get("error")
    if err:
        raise AdminError("%s: %s (error %s/%s)" % (what, err.get("description", "?"),
                                                   err.get("code", "?"), err.get("err_code", "?")))
    return resp


# -- backup ---------------------------------------------------------------------

async def backup(args, out=sys.stderr):
    stream, d = args.stream, args.dir
    data_path = os.path.join(d, DATA_FILE)
    if os.path.exists(os.path.join(d, MANIFEST_FILE)) or os.path.exists(data_path):
        if not args.force:
            raise AdminError("%s already holds a backup (use --force to overwrite it)" % d)
    try:
        private.make_dirs(d)  # 0700, as the store it copies
    except OSError as e:
        raise AdminError("cannot create %s: %s" % (d, e.strerror or e)) from None
    nc = await _connect(args.server, args.timeout)
    part = data_path + ".partial"
    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox, pending_msgs_limit=-1, pending_bytes_limit=-1)
        req = {"deliver_subject": inbox, "no_consumers": args.no_consumers,
               "chunk_size": args.chunk_size, "jsck": False}
        what = "backup of stream %s" % stream
        resp = await _api(nc, "$JS.API.STREAM.SNAPSHOT." + stream, req, args.timeout, what)
        state = resp.get("state") or {}
        progress = Progress("backup %s" % stream, total=state.get("bytes", 0), out=out,
                            quiet=args.quiet, estimate=True)
        sha = hashlib.sha256()
        size = chunks = 0
        try:
            f = os.fdopen(private.open_file(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb")
        except OSError as e:
            raise AdminError("cannot write %s: %s" % (part, e.strerror or e)) from None
        with f:
            while True:
                try:
                    msg = await sub.next_msg(timeout=args.timeout)
                except Exception as e:
                    if "timeout" in e.__class__.__name__.lower():
                        raise AdminError("%s: no data from the server for %gs"
                                         % (what, args.timeout)) from None
                    raise
                if not msg.data:
                    status = (msg.headers or {}).get("Status")
                    if status and status not in ("204", "200"):
                        desc = (msg.headers or {}).get("Description", "")
                        raise AdminError("%s: the server ended the snapshot with status %s %s"
                                         % (what, status, desc))
                    break
                f.write(msg.data)
                sha.update(msg.data)
                size += len(msg.data)
                chunks += 1
                if msg.reply:
                    await nc.publish(msg.reply, b"")
                progress.update(len(msg.data))
            f.flush()
            os.fsync(f.fileno())
        progress.finish()
        await sub.unsubscribe()
        # Read back what was written: the bytes on disk are what counts.
        digest, fsize, fmt, reader = check_data(part)
        if digest != sha.hexdigest() or fsize != size:
            raise AdminError("%s: the file on disk differs from what was received" % part)
        if fmt == FORMAT_NATSBROKER and reader.header.get("stream") != stream:
            raise AdminError("%s: the snapshot is of stream %r" % (what, reader.header.get("stream")))
        info = nc._server_info or {}
        manifest = {
            "tool": "natsbroker-admin", "version": 1, "stream": stream, "format": fmt,
            "data_file": DATA_FILE, "size": size, "chunks": chunks, "sha256": digest,
            "server": {"name": info.get("server_name", ""), "version": info.get("version", "")},
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "consumers": not args.no_consumers,
        }
        if reader is not None:
            manifest["messages"] = reader.messages
            manifest["consumer_count"] = reader.consumers
            manifest["first_seq"] = (reader.header.get("state") or {}).get("first_seq", 0)
            manifest["last_seq"] = reader.end.get("last_seq", 0)
        os.replace(part, data_path)
        _write_json(os.path.join(d, META_FILE), {"config": resp.get("config"), "state": state})
        _write_json(os.path.join(d, MANIFEST_FILE), manifest)
    finally:
        if os.path.exists(part):
            os.unlink(part)
        await nc.close()
    line = "backed up stream %s to %s: %s in %d chunks, %s/s" % (
        stream, d, _size(size), chunks, _size(progress.final_rate))
    if reader is not None:
        line += "; %d messages, %d consumers" % (reader.messages, reader.consumers)
    line += "; SHA-256 %s verified" % digest
    if fmt != FORMAT_NATSBROKER:
        line += " (%s format: its contents are not checked)" % fmt
    print(line, file=out)
    return 0


# -- restore --------------------------------------------------------------------

async def restore(args, out=sys.stderr):
    d = args.dir
    meta = _read_json(os.path.join(d, META_FILE), META_FILE)
    manifest_path = os.path.join(d, MANIFEST_FILE)
    manifest = _read_json(manifest_path, MANIFEST_FILE) if os.path.exists(manifest_path) else None
    data_path = os.path.join(d, (manifest or {}).get("data_file") or DATA_FILE)
    if not os.path.exists(data_path):
        raise AdminError("%s: no %s" % (d, os.path.basename(data_path)))
    total = os.path.getsize(data_path)
    check = Progress("verify %s" % os.path.basename(data_path), total=total, out=out,
                     quiet=args.quiet, chunks=False)
    digest, size, fmt, reader = check_data(data_path, manifest, check)
    check.finish()
    if manifest is None:
        print("warning: %s has no %s: only the snapshot's own checks were made"
              % (d, MANIFEST_FILE), file=out)
    config = dict(meta.get("config") or {})
    name = args.stream or config.get("name") or (manifest or {}).get("stream")
    if not name:
        raise AdminError("%s: the backup does not name its stream (use --stream)" % d)
    config["name"] = name
    if isinstance(config.get("metadata"), dict):
        # Reply-only keys of the server that made the backup.
        config["metadata"] = {k: v for k, v in config["metadata"].items()
                              if k not in ("_nats.ver", "_nats.level")}
    body = {"config": config, "state": meta.get("state") or {}}
    what = "restore of stream %s" % name
    nc = await _connect(args.server, args.timeout)
    nats = _nats()
    try:
        resp = await _api(nc, "$JS.API.STREAM.RESTORE." + name, body, args.timeout, what)
        subject = resp.get("deliver_subject")
        if not subject:
            raise AdminError("%s: the server gave no deliver subject" % what)
        if nc.max_payload and args.chunk_size > nc.max_payload:
            raise AdminError("chunk size %d exceeds the server's max_payload %d"
                             % (args.chunk_size, nc.max_payload))
        progress = Progress("restore %s" % name, total=size, out=out, quiet=args.quiet)
        with open(data_path, "rb") as f:
            while True:
                chunk = f.read(args.chunk_size)
                if not chunk:
                    break
                try:
                    ack = await nc.request(subject, chunk, timeout=args.timeout)
                except nats.errors.NoRespondersError:
                    raise AdminError("%s: the server abandoned the restore" % what) from None
                except nats.errors.TimeoutError:
                    raise AdminError("%s: chunk not acknowledged in %gs"
                                     % (what, args.timeout)) from None
                if ack.data:
                    if ack.data.startswith(b"-ERR"):
                        raise AdminError("%s: %s" % (what, ack.data.decode(errors="replace")))
                    _decode(ack.data, what)
                progress.update(len(chunk))
        progress.finish()
        try:
            final = await nc.request(subject, b"", timeout=max(args.timeout, 300))
        except nats.errors.NoRespondersError:
            raise AdminError("%s: the server abandoned the restore" % what) from None
        except nats.errors.TimeoutError:
            raise AdminError("%s: no final answer from the server" % what) from None
        resp = _decode(final.data, what)
        if resp.get("type") != "io.nats.jetstream.api.v1.stream_create_response":
            raise AdminError("%s: unexpected final answer of type %r" % (what, resp.get("type")))
    finally:
        await nc.close()
    st = resp.get("state") or {}
    print("restored stream %s from %s: %s in %d chunks, %s/s; %d messages (seq %d..%d), "
          "%d consumers" % (name, d, _size(size), progress.chunks, _size(progress.final_rate),
                            st.get("messages", 0), st.get("first_seq", 0), st.get("last_seq", 0),
                            st.get("consumer_count", 0)), file=out)
    return 0


def is_backup_dir(d):
    return any(os.path.exists(os.path.join(d, n)) for n in (META_FILE, MANIFEST_FILE))


def verify(args, out=sys.stderr):
    d = args.dir
    if not is_backup_dir(d) and os.path.isdir(d):
        return verify_store(args)
    if args.stream or args.json:
        raise UsageError("%s: --stream and --json are for stores, this is a backup directory"
                         % d)
    _read_json(os.path.join(d, META_FILE), META_FILE)
    manifest_path = os.path.join(d, MANIFEST_FILE)
    manifest = _read_json(manifest_path, MANIFEST_FILE) if os.path.exists(manifest_path) else None
    data_path = os.path.join(d, (manifest or {}).get("data_file") or DATA_FILE)
    if not os.path.exists(data_path):
        raise AdminError("%s: no %s" % (d, os.path.basename(data_path)))
    check = Progress("verify %s" % os.path.basename(data_path), total=os.path.getsize(data_path),
                     out=out, quiet=args.quiet, chunks=False)
    digest, size, fmt, reader = check_data(data_path, manifest, check)
    check.finish()
    line = "%s: %s, %s format, SHA-256 %s" % (d, _size(size), fmt, digest)
    if reader is not None:
        line += ", %d messages, %d consumers" % (reader.messages, reader.consumers)
    print(line + ": OK", file=out)
    return 0


# -- the store of a stopped server ------------------------------------------------------

def _select(args, need_choice):
    """``(streams, quarantined, single)``: the
    :class:`~natsbroker.store.fsck.StreamDir` the command line names, the
    store's quarantined directories, and whether DIR is one stream's directory
    (no --stream needed)."""
    from natsbroker.store import fsck as check
    try:
        streams, quarantined = check.find_streams(args.dir)
    except check.CheckError as e:
        raise UsageError("%s; nor a backup directory (no %s)" % (e, META_FILE)) from None
    single = len(streams) == 1 and streams[0].path == os.path.abspath(args.dir)
    if args.stream:
        chosen = [s for s in streams if s.name == args.stream]
        if not chosen:
            raise UsageError("%s: no stream %s (streams: %s)" % (
                args.dir, args.stream, ", ".join(s.name for s in streams) or "none"))
        return chosen, [], single
    if need_choice and not single and not getattr(args, "all", False):
        raise UsageError("name the stream to repair with --stream NAME, or use --all "
                         "(streams: %s)" % (", ".join(s.name for s in streams) or "none"))
    return streams, quarantined, single


def _print_json(value, out):
    json.dump(value, out, indent=2)
    out.write("\n")


def verify_store(args, out=sys.stdout):
    """``verify STORE_DIR``: 0 when every stream verifies, 1 on damage."""
    from natsbroker.store import fsck as check
    streams, quarantined, single = _select(args, False)
    reports = [check.verify_stream(sd) for sd in _steps(streams, "verify", "stream", quiet=args.quiet)]
    ok = all(r.ok for r in reports)
    if args.json:
        _print_json({"path": os.path.abspath(args.dir), "ok": ok,
                     "streams": [r.as_json() for r in reports],
                     "quarantined": quarantined}, out)
        return 0 if ok else 1
    for r in reports:
        print("\n".join(r.lines()), file=out)
    for q in quarantined:
        print("quarantined: %s (not examined: verify it by naming the directory)" % q, file=out)
    bad = [r.name for r in reports if not r.ok]
    if bad:
        hint = ("natsbroker-admin repair %s" % args.dir if single else
                "; ".join("natsbroker-admin repair %s --stream %s" % (args.dir, n) for n in bad))
        print("%d of %d stream(s) damaged: %s. To repair (server stopped): %s"
              % (len(bad), len(reports), ", ".join(bad), hint), file=out)
        return 1
    print("%d stream(s) verified: OK" % len(reports), file=out)
    return 0


def _confirm(streams, out):
    """Ask on a terminal; anything else must say --yes."""
    names = ", ".join(s.name for s in streams)
    if not sys.stdin.isatty():
        raise UsageError("repair of %s: add --yes to confirm (stdin is not a terminal)" % names)
    out.write("Repair stream(s) %s? The server must be stopped; a full copy of each "
              "stream's files is kept under quarantine/. [y/N] " % names)
    out.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def repair_store(args, out=sys.stdout):
    """``repair STORE_DIR``: 0 when every repaired stream verifies afterwards."""
    from natsbroker.store import fsck as check
    streams, _, _ = _select(args, True)
    if not streams:
        raise UsageError("%s: no streams" % args.dir)
    if not args.yes and not _confirm(streams, out):
        print("nothing done", file=out)
        return 1
    reports = []
    bar = _steps(streams, "repair", "stream", quiet=args.quiet)
    for sd in bar:
        rep = check.repair_stream(sd)
        reports.append(rep)
        if not args.json:
            _say(bar, "\n".join(rep.lines()), out)
    ok = all(r.ok for r in reports)
    if args.json:
        _print_json({"path": os.path.abspath(args.dir), "ok": ok,
                     "streams": [r.as_json() for r in reports]}, out)
    return 0 if ok else 1


# -- command line ------------------------------------------------------------------

def _positive_of(kind):
    """An argparse type: a ``kind`` (int, float) above zero."""
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError("not a number: %r" % text) from None
        if v <= 0:
            raise argparse.ArgumentTypeError("must be positive: %r" % text)
        return v
    return parse


_positive = _positive_of(int)
_seconds = _positive_of(float)


def parser():
    p = argparse.ArgumentParser(
        prog="natsbroker-admin",
        description="Back up, restore, verify and repair JetStream streams.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def common(sp):
        sp.add_argument("--server", "-s", default=os.environ.get("NATS_URL") or DEFAULT_SERVER,
                        help="server URL (default: $NATS_URL or %s)" % DEFAULT_SERVER)
        sp.add_argument("--timeout", type=_seconds, default=10.0,
                        help="seconds to wait for the server (default 10)")
        sp.add_argument("--chunk-size", type=_positive, default=DEFAULT_CHUNK,
                        help="chunk size in bytes (default %d)" % DEFAULT_CHUNK)
        sp.add_argument("--quiet", "-q", action="store_true", help="no progress bar")

    b = sub.add_parser("backup", help="snapshot STREAM into the directory DIR")
    b.add_argument("stream", metavar="STREAM")
    b.add_argument("dir", metavar="DIR")
    b.add_argument("--no-consumers", action="store_true", help="leave the consumers out")
    b.add_argument("--force", action="store_true", help="overwrite a backup already in DIR")
    common(b)
    r = sub.add_parser("restore", help="restore the stream backed up in DIR")
    r.add_argument("dir", metavar="DIR")
    r.add_argument("--stream", help="restore under this name instead of the original")
    common(r)
    v = sub.add_parser("verify", help="check a backup directory, or a stopped server's store")
    v.add_argument("dir", metavar="DIR", help="a backup directory, or a store: the server's "
                   "store_dir, its jetstream/ directory or one stream's directory")
    v.add_argument("--stream", help="only this stream of the store")
    v.add_argument("--json", action="store_true", help="a machine-readable report (stores)")
    v.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    rp = sub.add_parser("repair", help="repair streams of a stopped server's store, keeping "
                        "what verifies (a full copy of the files is kept first)")
    rp.add_argument("dir", metavar="STORE_DIR")
    which = rp.add_mutually_exclusive_group()
    which.add_argument("--stream", help="the stream to repair")
    which.add_argument("--all", action="store_true", help="every stream of the store")
    rp.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    rp.add_argument("--json", action="store_true", help="a machine-readable report")
    rp.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    from natsbroker.store.fsck import StoreInUse
    try:
        if args.command == "backup":
            return asyncio.run(backup(args))
        if args.command == "restore":
            return asyncio.run(restore(args))
        if args.command == "repair":
            return repair_store(args)
        return verify(args)
    except UsageError as e:
        print("natsbroker-admin: error: %s" % e, file=sys.stderr)
        return 2
    except AdminError as e:
        print("natsbroker-admin: error: %s" % e, file=sys.stderr)
        return 1
    except StoreInUse as e:
        print("natsbroker-admin: error: store is in use (is the server running?): %s" % e.path,
              file=sys.stderr)
        return 2
    except Exception as e:
        if not type(e).__module__.startswith("nats."):
            raise
        # The connection failed under us (closed, slow consumer...).
        print("natsbroker-admin: error: %s" % _describe(e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("natsbroker-admin: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
