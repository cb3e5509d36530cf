"""A process and its descendants, read from /proc (Linux): the Spark bench
counts its Python workers' CPU with it, the kill tests find every process
of a run to kill (PySpark's daemon leaves the ingest's process group)."""

import os


def stat(pid):
    """The fields of ``/proc/<pid>/stat`` after the command name (field 3,
    the state, first), or None when the process is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def descendants(pid):
    """[(pid, stat fields)] of every living descendant of ``pid``."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            f = stat(int(d))
            if f is not None:
                children.setdefault(int(f[1]), []).append((int(d), f))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child[0])
    return out
