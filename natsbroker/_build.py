"""Which build runs: the compiled hot modules, or their interpreted sources.

setup.py compiles some modules with Cython from their own ``.py`` source and
writes ``<extension>.sha256`` beside each extension: the hash of the source it
was built from. :func:`install` (called first thing by ``natsbroker/__init__``)
puts a finder on ``sys.meta_path`` that, for every module with such an
extension, imports the ``.py`` instead when

* ``NATSBROKER_PURE=1`` is set (the interpreted build on demand), or
* the source has changed since the extension was built: a stale extension
  would run old code, so it is refused with a warning until it is rebuilt.

Only stdlib here: this runs before anything else of natsbroker is imported.
"""

import _imp
import hashlib
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader
from importlib.util import spec_from_file_location

PURE_ENV = "NATSBROKER_PURE"

# Modules that have an extension of ours beside their source, in import order.
_SEEN = []
# {module: why its source runs instead of its extension}
_INTERPRETED = {}


def pure_requested():
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def source_hash(py_path):
    """sha256 of a module's source (.py and its .pxd), as setup.py computes it."""
    h = hashlib.sha256()
    for path in (py_path, os.path.splitext(py_path)[0] + ".pxd"):
        try:
            with open(path, "rb") as f:
                h.update(f.read())
        except FileNotFoundError:
            pass
    return h.hexdigest()


def _built_from(sidecar):
    try:
        with open(sidecar) as f:
            return f.read().split()[0]
    except (OSError, IndexError):
        return None


_RUN = compile("exec_dynamic(module)", "<compiled module init>", "exec")


class _ExtensionLoader(ExtensionFileLoader):
    def exec_module(self, module):
        # Compiled code runs without Python frames, so module-level code that
        # names its caller's module (Twisted's ``Logger()``) would find
        # importlib's: run it from a frame whose __name__ is the module's own.
        # (ExtensionFileLoader.exec_module calls _imp.exec_dynamic from a
        # frame of importlib's, which would be the caller found.)
        exec(_RUN, {"__name__": module.__name__, "module": module,
                    "exec_dynamic": _imp.exec_dynamic})


class CompiledFinder:
    """Chooses between a module's extension and its source (see the module docstring)."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if path is None:  # our compiled modules all live in packages
            return None
        tail = fullname.rpartition(".")[2]
        for directory in path:
            for suffix in EXTENSION_SUFFIXES:
                extension = os.path.join(directory, tail + suffix)
                if os.path.isfile(extension + ".sha256"):
                    break
            else:
                stem = os.path.join(directory, tail)
                if os.path.isfile(stem + ".py") or os.path.isdir(stem):
                    return None  # found here first: the usual import takes it
                continue
            source = os.path.join(directory, tail + ".py")
            if not (os.path.isfile(extension) and os.path.isfile(source)):
                return None
            _SEEN.append(fullname)
            if pure_requested():
                _INTERPRETED[fullname] = PURE_ENV + "=1"
            elif _built_from(extension + ".sha256") != source_hash(source):
                _INTERPRETED[fullname] = "stale"
            else:
                return spec_from_file_location(fullname, extension,
                                               loader=_ExtensionLoader(fullname, extension))
            return spec_from_file_location(fullname, source)
        return None


def install():
    if CompiledFinder not in sys.meta_path:
        sys.meta_path.insert(0, CompiledFinder)


def _is_extension(module):
    return (getattr(module, "__file__", None) or "").endswith(tuple(EXTENSION_SUFFIXES))


def compiled():
    """The modules imported so far that run compiled, by their ``__file__``."""
    return [name for name in _SEEN if _is_extension(sys.modules.get(name))]


def interpreted():
    """``{module: reason}`` for modules imported so far that have an extension but run
    from source (reason: ``NATSBROKER_PURE=1`` or ``stale``)."""
    return {name: why for name, why in _INTERPRETED.items()
            if name in sys.modules and not _is_extension(sys.modules[name])}


def kind():
    """``compiled``, ``interpreted`` or ``mixed`` (some modules refused as stale)."""
    done, fallback = compiled(), interpreted()
    if done and fallback:
        return "mixed"
    return "compiled" if done else "interpreted"


def info():
    """The build as /varz shows it (natsbroker's own field, not nats-server's)."""
    return {"kind": kind(), "compiled": compiled(), "interpreted": interpreted()}


def log_build(log):
    """The start-up lines: which build runs, and a warning per stale extension."""
    done, fallback = compiled(), interpreted()
    if done and fallback:
        log.info("Build: mixed (compiled: {compiled}; interpreted: {interpreted})",
                 compiled=", ".join(done), interpreted=", ".join(fallback))
    elif done:
        log.info("Build: compiled ({modules})", modules=", ".join(done))
    elif fallback and pure_requested():
        log.info("Build: interpreted ({env}=1)", env=PURE_ENV)
    else:
        log.info("Build: interpreted")
    for name, why in fallback.items():
        if why == "stale":
            log.warn("Compiled {module} is older than its source: running the source "
                     "(rebuild: python setup.py build_ext --inplace)", module=name)
