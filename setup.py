"""Packages, and the optional compiled build of the hot modules (metadata: setup.cfg).

The modules in COMPILED are compiled by Cython in pure-Python mode: the ``.py``
file is the source (a ``.pxd`` beside it may add types), so there is no second
implementation. Without Cython or a C compiler the build warns and goes on, and
those modules run interpreted. Each extension gets a ``<extension>.sha256``
beside it, the hash of the source it was built from: natsbroker/_build.py
refuses a compiled module whose source has changed since (a stale build).
"""

import hashlib
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# The hot path as profiled (tools/bench/PERF.md). Paths, so the list does not
# depend on package names. Each one is here for a gain measured with it
# interpreted against compiled (PERF.md, "Which modules stay compiled");
# a module without one runs interpreted: compiled, an attribute read is slower.
COMPILED = [
    "natsbroker/protocol/parser.py",
    "natsbroker/subjects/sublist.py",
    "natsbroker/connection/client.py",
    "natsbroker/accounts/account.py",
    "natsbroker/pubsub.py",
]

# Annotations are ignored: the sources are written for Python's semantics (an
# ``int`` annotation must not become a C type or reject None); types belong in .pxd files.
DIRECTIVES = {"language_level": 3, "annotation_typing": False, "binding": True}

CYTHON_DIR = os.path.join("build", "cython")


def source_hash(py_path):
    """sha256 of a compiled module's source (.py and its .pxd): natsbroker/_build.py does the same."""
    h = hashlib.sha256()
    for path in (py_path, os.path.splitext(py_path)[0] + ".pxd"):
        if os.path.exists(path):
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def _read(path):
    try:
        with open(path) as f:
            return f.read().split()[0]
    except (OSError, IndexError):
        return None


class optional_build_ext(build_ext):
    """Cythonizes at build time, one module at a time; whatever fails runs interpreted.
    In place, an extension whose recorded source hash is the source's own is left as it is."""

    def run(self):
        self._all = list(self.extensions)
        self.extensions = []
        self._hashes = {}
        try:
            from Cython.Build import cythonize
        except ImportError:
            self.warn("Cython is not installed: %s run interpreted" % ", ".join(COMPILED))
            cythonize = None
        self._current = set()
        build_py = self.get_finalized_command("build_py")
        for ext in self._all:
            py = ext.sources[0]
            digest = source_hash(py)
            inplace = self._get_inplace_equivalent(build_py, ext)[0]
            if self.inplace and os.path.exists(inplace) and _read(inplace + ".sha256") == digest:
                self._current.add(ext.name)  # built from this very source already
                continue
            if cythonize is None:
                continue
            c_file = os.path.join(CYTHON_DIR, os.path.splitext(py)[0] + ".c")
            stamp = c_file + ".sha256"
            try:
                # By content, not only by time: an edit that kept the file's
                # mtime must not leave the old C code in place.
                (cext,) = cythonize([ext], build_dir=CYTHON_DIR, compiler_directives=DIRECTIVES,
                                    force=_read(stamp) != digest, quiet=True)
            except Exception as e:  # Cython's CompileError, or anything it trips on
                self.warn("cannot cythonize %s (%s): it runs interpreted" % (py, e))
                continue
            with open(stamp, "w") as f:
                f.write("%s  %s\n" % (digest, os.path.basename(py)))
            # The original keeps what setuptools set on it in finalize_options.
            ext.sources = cext.sources
            self._hashes[ext.name] = (digest, os.path.basename(py))
            self.extensions.append(ext)
        super().run()

    def build_extension(self, ext):
        sidecar = self.get_ext_fullpath(ext.name) + ".sha256"
        if os.path.exists(sidecar):
            os.remove(sidecar)  # written again only if this build succeeds
        super().build_extension(ext)
        with open(sidecar, "w") as f:
            f.write("%s  %s\n" % self._hashes[ext.name])

    def copy_extensions_to_source(self):
        build_py = self.get_finalized_command("build_py")
        for ext in self._all:
            inplace, regular = self._get_inplace_equivalent(build_py, ext)
            if ext.name in self._current:
                continue
            if ext in self.extensions and os.path.exists(regular + ".sha256"):
                self.copy_file(regular, inplace, level=self.verbose)
                self.copy_file(regular + ".sha256", inplace + ".sha256", level=self.verbose)
            else:
                # Not built this time: an older extension left in place would
                # otherwise be imported as if current.
                for path in (inplace, inplace + ".sha256"):
                    if os.path.exists(path):
                        self.warn("removing %s (not rebuilt)" % path)
                        os.remove(path)
        self._remove_dropped()

    def _remove_dropped(self):
        """Removes our in-place extensions of modules no longer in COMPILED: the
        loader would still import them (their source hash still matches)."""
        kept = {os.path.splitext(p)[0] for p in COMPILED}
        for top, _dirs, files in os.walk("natsbroker"):
            for name in files:
                if not name.endswith(".sha256"):
                    continue
                extension = os.path.join(top, name[:-len(".sha256")])
                stem = os.path.join(top, name.split(".", 1)[0])
                if stem not in kept:
                    for path in (extension, extension + ".sha256"):
                        if os.path.exists(path):
                            self.warn("removing %s (not in COMPILED)" % path)
                            os.remove(path)


# Packages, package data and data files: setup.cfg.
setup(
    ext_modules=[Extension(os.path.splitext(p)[0].replace("/", "."), [p], optional=True)
                 for p in COMPILED],
    cmdclass={"build_ext": optional_build_ext},
)
