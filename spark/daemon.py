"""The daemon that forks the ingest's Python workers: pyspark's own
(``pyspark.daemon``), loaded from the installed pyspark rather than from
pyspark.zip when the two are the same release.

Spark starts the daemon as ``python -m <spark.python.daemon.module>
pyspark.worker`` with ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's
source zip first on its PYTHONPATH. Python keeps no compiled bytecode for
modules imported from a zip, so every daemon compiled pyspark from source
(1.4 s before the first worker could fork, against 0.34 s from the installed
package), and every worker compiled ``pyspark.worker`` again: about 1.5 s of
the first Python job of each Spark session, a tenth of a 1M-record
backfill. When the installed pyspark and py4j (found on the rest of the
path) are the releases in those zips, the zips are taken off ``sys.path``
before anything is imported from them; otherwise (a SPARK_HOME of another
release, say) the path is left as Spark made it.

Set by spark/session.py (``spark.python.daemon.module``); the forked workers
inherit the path. Only the standard library is imported before the choice.
"""

import importlib.machinery
import os
import sys
import zipfile

# The zip Spark puts on the path -> the package in it whose release must match.
_ZIPPED = (("pyspark.zip", "pyspark"), ("py4j-", "py4j"))


def _version_file(text):
    """The release in a version.py (``__version__ ... = '...'``)."""
    for line in text.splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("'\"")
    return None


def _zipped_package(entry):
    name = os.path.basename(entry)
    for prefix, package in _ZIPPED:
        if entry.endswith(".zip") and name.startswith(prefix):
            return package
    return None


def installed_path(path):
    """``path`` without Spark's zips if the installed packages are the same
    releases as the zipped ones; ``path`` itself otherwise."""
    zips = [(e, _zipped_package(e)) for e in path if _zipped_package(e)]
    if not zips:
        return path
    rest = [e for e in path if not _zipped_package(e)]
    for entry, package in zips:
        spec = importlib.machinery.PathFinder.find_spec(package, rest)
        if spec is None or not spec.submodule_search_locations:
            return path
        try:
            with zipfile.ZipFile(entry) as z:
                zipped = _version_file(z.read(package + "/version.py").decode("utf-8"))
            with open(os.path.join(list(spec.submodule_search_locations)[0], "version.py"),
                      encoding="utf-8") as f:
                installed = _version_file(f.read())
        except (OSError, KeyError, UnicodeDecodeError, zipfile.BadZipFile):
            return path
        if zipped is None or zipped != installed:
            return path
    return rest


def main():
    sys.path[:] = installed_path(sys.path)
    from pyspark.daemon import manager
    manager()


if __name__ == "__main__":
    main()
