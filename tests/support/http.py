"""GET from a server's HTTP(S) monitoring port."""

import json
import urllib.error
import urllib.request


def _base(server, scheme):
    if isinstance(server, str):  # a URL the server listed, "https://host:port"
        return server
    port = server if isinstance(server, int) else server.http_port
    return "%s://127.0.0.1:%d" % (scheme, port)


def http(server, path, headers=None, timeout=10, context=None, scheme=None):
    """``(status, headers with lower-case names, body bytes)`` of GET ``path``
    on ``server`` (something with ``http_port``, a port, or a base URL);
    error statuses are returned, not raised."""
    scheme = scheme or ("https" if context is not None else "http")
    req = urllib.request.Request(_base(server, scheme) + path, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def get_json(server, path, **kw):
    """The JSON document at ``path``, which must answer 200."""
    status, _, body = http(server, path, **kw)
    assert status == 200, (path, status, body)
    return json.loads(body)
