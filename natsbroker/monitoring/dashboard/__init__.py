"""The monitoring port's pages: the index (``/``) and the live dashboard
(``/dashboard`` and its files under ``/dashboard/``).

The files are package data, read with :mod:`importlib.resources`, so they are
found in a wheel and in an editable install alike. The chart library is uPlot
1.6.32 (MIT, ``vendor/uplot``: its ``dist/uPlot.iife.min.js``,
``dist/uPlot.min.css`` and ``LICENSE`` from npm's ``uplot`` package), vendored
as published: there is no build step.
"""

import functools
import hashlib
import string
from importlib import resources

import attrs

# The files served under /dashboard/, by the name in the URL. A request can
# only name a key of this table, never a path: nothing else in the package (or
# outside it) is reachable, however the URL is spelt.
FILES = {
    "dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    "dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
    "uPlot.iife.min.js": ("vendor/uplot/uPlot.iife.min.js", "text/javascript; charset=utf-8"),
    "uPlot.min.css": ("vendor/uplot/uPlot.min.css", "text/css; charset=utf-8"),
    "uPlot.LICENSE": ("vendor/uplot/LICENSE", "text/plain; charset=utf-8"),
}

DASHBOARD = ("dashboard.html", "text/html; charset=utf-8")

# The dashboard loads its own files and polls the JSON endpoints of the same
# origin, nothing else: anything injected could not load or send elsewhere.
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; "
                           "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
                           "form-action 'none'; frame-ancestors 'none'")


@attrs.frozen
class Asset:
    """One file as served: its bytes, Content-Type and a strong ETag."""

    body: bytes
    content_type: str
    etag: str


@functools.cache
def _load(path, content_type):
    body = resources.files(__name__).joinpath(path).read_bytes()
    return Asset(body, content_type, '"%s"' % hashlib.sha256(body).hexdigest()[:32])


def asset(name):
    """The file served as ``/dashboard/<name>``, or None."""
    entry = FILES.get(name)
    return None if entry is None else _load(*entry)


def dashboard():
    """The live dashboard page."""
    return _load(*DASHBOARD)


@functools.cache
def _index_template():
    return string.Template(resources.files(__name__).joinpath("index.html").read_text("utf-8"))


def index(**fields):
    """The index page with ``fields`` (already HTML-escaped) filled in."""
    return _index_template().substitute(fields)
