"""NATS JWTs as nats-io/jwt v2 reads and writes them.

A NATS JWT is ``header.payload.signature``, each part base64url without
padding. The header says ``{"typ":"JWT","alg":"ed25519-nkey"}``; the payload
is JSON (``iss`` the issuer's public nkey, ``sub`` the subject's, ``iat``,
``exp``, ``jti``, ``name`` and a ``nats`` object with the claim's ``type``,
``version`` and the rest); the signature is the issuer's ed25519 signature
of ``header.payload``. Signatures are made and checked by the nkeys package
and PyNaCl (libsodium), never here; this module only does the JSON and
base64 around them, and reports a bad token with the text of the error the
Go library gives (nats-server logs it).

(The PyPI ``nats-jwt`` package was considered and not used: its ``decode``
raises when a v2 signature *does* verify, and it checks the signature
against the subject's key rather than the issuer's.)
"""

import base64
import binascii
import hashlib
import ipaddress
import json
import re
import time

import nacl.exceptions
import nacl.signing
import nkeys

from natsbroker import jsonbound
from natsbroker.gocompat.quote import go_quote

OPERATOR = "operator"
ACCOUNT = "account"
USER = "user"
ACTIVATION = "activation"
AUTHORIZATION = "authorization"

NO_LIMIT = -1
LIB_VERSION = 2
ALGORITHM = "ed25519-nkey"
_ALGORITHM_V1 = "ed25519"

_PREFIX = {
    "O": nkeys.PREFIX_BYTE_OPERATOR,
    "A": nkeys.PREFIX_BYTE_ACCOUNT,
    "U": nkeys.PREFIX_BYTE_USER,
    "N": nkeys.PREFIX_BYTE_SERVER,
    "C": nkeys.PREFIX_BYTE_CLUSTER,
}
# nkeys' PrefixByteCurve (X...), which nkeys.FromPublicKey also takes.
_PREFIX_CURVE = 23 << 3


class JWTError(ValueError):
    """A token that is not a valid NATS JWT; ``str()`` is Go's error text."""


# -- nkeys ------------------------------------------------------------------------


def public_key_raw(text, role=None):
    """The raw ed25519 key of the public nkey ``text`` (of ``role``, one of
    "O", "A", "U", "N", "C", or any role), or None if it is not one: a seed,
    a typo, another role's key (nkeys' ``IsValidPublic...Key``)."""
    if not isinstance(text, str) or not text or len(text) % 8 in (1, 3, 6):
        return None
    try:
        raw = base64.b32decode(text + "=" * (-len(text) % 8))
    except (binascii.Error, ValueError):
        return None
    if len(raw) != 35:
        return None
    body, crc = raw[:-2], raw[-2:]
    if nkeys.crc16(bytearray(body)) != int.from_bytes(crc, "little"):
        return None
    if role is None:
        if body[0] not in set(_PREFIX.values()) | {_PREFIX_CURVE}:
            return None
    elif body[0] != _PREFIX[role]:
        return None
    return body[1:]


def is_public_key(text, role):
    """Is ``text`` a valid public nkey of ``role`` ("O", "A", "U", ...)?"""
    return public_key_raw(text, role) is not None


def verify(public_key, data, signature):
    """Did the holder of the public nkey ``public_key`` sign ``data``?
    (libsodium's check, through PyNaCl.)"""
    raw = public_key_raw(public_key)
    if raw is None:
        return False
    try:
        nacl.signing.VerifyKey(raw).verify(data, signature)
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.ValueError,
            nacl.exceptions.TypeError, ValueError, TypeError):
        return False
    return True


def new_keypair(role):
    """A fresh nkeys KeyPair for ``role`` ("O", "A", "U"): for tests and
    tools that issue JWTs."""
    import os
    seed = nkeys.encode_seed(os.urandom(32), _PREFIX[role])
    return nkeys.from_seed(bytearray(seed))


def public_key_of(kp):
    """The public nkey (str) of an nkeys KeyPair."""
    key = kp.public_key
    return key.decode() if isinstance(key, (bytes, bytearray)) else key


def seed_of(kp):
    """The seed (str) of an nkeys KeyPair."""
    seed = kp.seed
    return bytes(seed).decode() if isinstance(seed, (bytes, bytearray)) else seed


# -- base64 as Go's RawURLEncoding ---------------------------------------------------

_RAW_URL = re.compile(r"[A-Za-z0-9_-]*\Z")


def _b64decode(text):
    """Go's ``base64.RawURLEncoding.DecodeString``: no padding, the URL
    alphabet; Go's error text otherwise."""
    text = text.replace("\r", "").replace("\n", "")
    if not _RAW_URL.match(text):
        bad = next(i for i, ch in enumerate(text) if not re.match(r"[A-Za-z0-9_-]", ch))
        raise JWTError("illegal base64 data at input byte %d" % bad)
    if len(text) % 4 == 1:
        raise JWTError("illegal base64 data at input byte %d" % (len(text) - 1))
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _b64encode(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


# -- JSON, with Go's type errors ---------------------------------------------------------

_JSON_KIND = {str: "string", bool: "bool", list: "array", dict: "object", type(None): "null"}


def _json_kind(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    return _JSON_KIND.get(type(v), "value")


def _loads(data):
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise JWTError("invalid character in JSON input") from None
    if not text.strip():
        raise JWTError("unexpected end of JSON input")
    try:
        return jsonbound.loads(text)
    except jsonbound.TooDeep as e:
        raise JWTError(str(e)) from None
    except json.JSONDecodeError as e:
        if e.pos >= len(text):
            raise JWTError("unexpected end of JSON input") from None
        ch = text[e.pos]
        raise JWTError("invalid character %s looking for beginning of value" % _go_char(ch)) from None


def _go_char(ch):
    if ch == "'":
        return "'\\''"
    if ch == '"':
        return "'\"'"
    return "'%s'" % ch


class _Schema:
    """Go's json.Unmarshal into a typed struct: a value of the wrong JSON
    type is an error naming the field (null keeps the zero value)."""

    INT = "int64"
    INT32 = "int"
    UINT8 = "uint8"
    STR = "string"
    BOOL = "bool"
    STRS = "[]string"

    def __init__(self, struct):
        self.struct = struct

    def check(self, value, spec, path):
        if value is None:
            return
        if isinstance(spec, dict):
            if not isinstance(value, dict):
                self._fail(value, path, spec.get("__go__", "struct"))
            for key, sub in spec.items():
                if key == "__go__":
                    continue
                if key == "*":
                    for k, v in value.items():
                        self.check(v, sub, path + [k])
                elif key in value:
                    self.check(value[key], sub, path + [key])
            return
        if isinstance(spec, list):
            if not isinstance(value, list):
                self._fail(value, path, "[]" + _go_name(spec[0]))
            for v in value:
                self.check(v, spec[0], path)
            return
        if callable(spec):
            spec(self, value, path)
            return
        if spec in (self.INT, self.INT32, self.UINT8):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                self._fail(value, path, spec)
            if isinstance(value, float) and not value.is_integer():
                raise JWTError("json: cannot unmarshal number %s into Go struct field %s of type %s"
                               % (_num(value), self._where(path), spec))
            if spec == self.UINT8 and not 0 <= value <= 255:
                raise JWTError("json: cannot unmarshal number %s into Go struct field %s of type %s"
                               % (_num(value), self._where(path), spec))
        elif spec == self.STR:
            if not isinstance(value, str):
                self._fail(value, path, spec)
        elif spec == self.BOOL:
            if not isinstance(value, bool):
                self._fail(value, path, spec)

    def _where(self, path):
        return ".".join([self.struct] + [str(p) for p in path])

    def _fail(self, value, path, gotype):
        raise JWTError("json: cannot unmarshal %s into Go struct field %s of type %s"
                       % (_json_kind(value), self._where(path), gotype))


def _num(v):
    return repr(v) if isinstance(v, float) else str(v)


def _go_name(spec):
    if isinstance(spec, str):
        return spec
    return "struct"


def _cidr_list(schema, value, path):
    # jwt.CIDRList: an array of strings or one comma-separated string.
    if isinstance(value, str):
        return
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        schema._fail(value, path, "jwt.CIDRList")


def _signing_keys(schema, value, path):
    # jwt.SigningKeys: strings and scope objects.
    if not isinstance(value, list):
        schema._fail(value, path, "jwt.SigningKeys")
    for v in value:
        if isinstance(v, dict):
            if v.get("kind") != USER_SCOPE:
                raise JWTError("unknown signing key scope %s" % _go_quote_or_nil(v.get("type")))
            schema.check(v, _USER_SCOPE_SPEC, path)
        elif not isinstance(v, str):
            schema._fail(v, path, "jwt.SigningKeys")


def _go_quote_or_nil(v):
    """Go's %q of a claim value: strings as strconv.Quote, nil as fmt shows it
    (anything else, which Go's typed claims would not hold, as JSON)."""
    if v is None:
        return "%!q(<nil>)"
    return go_quote(v) if isinstance(v, str) else json.dumps(v)


_S = _Schema
_PERMISSION = {"allow": [_S.STR], "deny": [_S.STR]}
_PERMISSIONS = {"pub": _PERMISSION, "sub": _PERMISSION, "resp": {"max": _S.INT32, "ttl": _S.INT}}
_TIME_RANGE = {"start": _S.STR, "end": _S.STR}
_LIMITS = {"src": _cidr_list, "times": [_TIME_RANGE], "times_location": _S.STR,
           "subs": _S.INT, "data": _S.INT, "payload": _S.INT}
_CLAIMS_DATA = {"aud": _S.STR, "exp": _S.INT, "jti": _S.STR, "iat": _S.INT, "iss": _S.STR,
                "name": _S.STR, "nbf": _S.INT, "sub": _S.STR}
_GENERIC = {"tags": [_S.STR], "type": _S.STR, "version": _S.INT32}
USER_SCOPE = "user_scope"
_USER_PERMISSION_LIMITS = dict(_PERMISSIONS, **_LIMITS, bearer_token=_S.BOOL,
                               allowed_connection_types=[_S.STR])
_USER_SCOPE_SPEC = {"kind": _S.STR, "key": _S.STR, "role": _S.STR, "description": _S.STR,
                    "template": _USER_PERMISSION_LIMITS}
_USER_SPEC = dict(_CLAIMS_DATA, nats=dict(_USER_PERMISSION_LIMITS, issuer_account=_S.STR,
                                          **_GENERIC))
_EXPORT = {"name": _S.STR, "subject": _S.STR, "type": _S.STR, "token_req": _S.BOOL,
           "revocations": {"*": _S.INT}, "response_type": _S.STR,
           "response_threshold": _S.INT, "account_token_position": _S.INT,
           "advertise": _S.BOOL, "allow_trace": _S.BOOL, "description": _S.STR,
           "info_url": _S.STR}
_IMPORT = {"name": _S.STR, "subject": _S.STR, "account": _S.STR, "token": _S.STR,
           "to": _S.STR, "local_subject": _S.STR, "type": _S.STR, "share": _S.BOOL,
           "allow_trace": _S.BOOL}
_OPERATOR_LIMITS = {"subs": _S.INT, "data": _S.INT, "payload": _S.INT, "imports": _S.INT,
                    "exports": _S.INT, "wildcards": _S.BOOL, "disallow_bearer": _S.BOOL,
                    "conn": _S.INT, "leaf": _S.INT, "mem_storage": _S.INT,
                    "disk_storage": _S.INT, "streams": _S.INT, "consumer": _S.INT,
                    "max_ack_pending": _S.INT, "mem_max_stream_bytes": _S.INT,
                    "disk_max_stream_bytes": _S.INT, "max_bytes_required": _S.BOOL}
_ACCOUNT_SPEC = dict(_CLAIMS_DATA, nats=dict(
    imports=[_IMPORT], exports=[_EXPORT], limits=_OPERATOR_LIMITS,
    signing_keys=_signing_keys, revocations={"*": _S.INT},
    default_permissions=_PERMISSIONS,
    mappings={"*": [{"subject": _S.STR, "weight": _S.UINT8, "cluster": _S.STR}]},
    description=_S.STR, info_url=_S.STR, **_GENERIC))
_OPERATOR_SPEC = dict(_CLAIMS_DATA, nats=dict(
    signing_keys=[_S.STR], account_server_url=_S.STR, operator_service_urls=[_S.STR],
    system_account=_S.STR, assert_server_version=_S.STR,
    strict_signing_key_usage=_S.BOOL, **_GENERIC))
_GENERIC_SPEC = dict(_CLAIMS_DATA)


# -- claims --------------------------------------------------------------------------------


class Claims:
    """A decoded JWT: ``data`` is its payload (a dict), ``nats`` the
    ``nats`` object in it (the claims of its kind)."""

    kind = "generic"
    expected_prefixes = None  # roles whose keys may issue this kind

    def __init__(self, data, version=LIB_VERSION, token=""):
        self.data = data
        self.version = version
        self.token = token
        nats = data.get("nats")
        self.nats = nats if isinstance(nats, dict) else {}

    def __repr__(self):
        return "<%s %s>" % (type(self).__name__, self.subject)

    def _get(self, key, default):
        v = self.data.get(key)
        return default if v is None else v

    subject = property(lambda self: self._get("sub", ""))
    issuer = property(lambda self: self._get("iss", ""))
    issued_at = property(lambda self: int(self._get("iat", 0)))
    expires = property(lambda self: int(self._get("exp", 0)))
    not_before = property(lambda self: int(self._get("nbf", 0)))
    name = property(lambda self: self._get("name", ""))
    id = property(lambda self: self._get("jti", ""))
    tags = property(lambda self: list(self.nats.get("tags") or ()))

    def validate(self, vr, now=None):
        """ClaimsData.Validate: expiry and not-before, as time checks."""
        now = int(time.time()) if now is None else now
        if self.expires > 0 and now > self.expires:
            vr.add_time_check("claim is expired")
        if self.not_before > 0 and self.not_before > now:
            vr.add_time_check("claim is not yet valid")


class UserClaims(Claims):
    kind = USER
    expected_prefixes = ("A",)

    issuer_account = property(lambda self: self.nats.get("issuer_account") or "")
    bearer_token = property(lambda self: bool(self.nats.get("bearer_token")))

    def validate(self, vr, now=None):
        super().validate(vr, now)
        validate_permissions(self.nats, vr)
        validate_limits(self.nats, vr)
        ia = self.issuer_account
        if ia and not is_public_key(ia, "A"):
            vr.add_error("account_id is not an account public key")


class AccountClaims(Claims):
    kind = ACCOUNT
    expected_prefixes = ("A", "O")

    def signing_keys(self):
        """``{public key: scope dict or None}`` (a scope: a ``user_scope``
        with its ``template`` of permissions and limits)."""
        out = {}
        for v in self.nats.get("signing_keys") or ():
            if isinstance(v, str):
                out[v] = None
            elif isinstance(v, dict):
                out[v.get("key", "")] = v
        return out

    def revocations(self):
        return dict(self.nats.get("revocations") or {})

    def limits(self):
        return dict(self.nats.get("limits") or {})

    def validate(self, vr, now=None):
        super().validate(vr, now)
        nats = self.nats
        limits = nats.get("limits") or {}
        tiered = limits.get("tiered_limits") or {}
        if tiered:
            if any(limits.get(k) for k in ("mem_storage", "disk_storage", "streams", "consumer",
                                             "max_ack_pending", "mem_max_stream_bytes",
                                             "disk_max_stream_bytes", "max_bytes_required")):
                vr.add_error("JetStream Limits and tiered JetStream Limits are mutually exclusive")
            if "" in tiered:
                vr.add_error('Tiered JetStream Limits can not contain a blank "" tier name')
        validate_permissions(nats.get("default_permissions") or {}, vr)
        for src, dests in (nats.get("mappings") or {}).items():
            _validate_subject(src, vr)
            total = 0
            for d in dests or ():
                _validate_subject(d.get("subject") or "", vr)
                if not d.get("cluster"):
                    total += d.get("weight") or 100
            if total > 100:
                vr.add_error("Mapping %s exceeds 100%% among all of it's weighted to mappings"
                             % go_quote(src))
        exports = nats.get("exports") or []
        imports = nats.get("imports") or []
        validate_exports(exports, vr)
        validate_imports(imports, self.subject, vr)
        # jwt.Account.Validate's limit checks, an absent limit being Go's
        # zero (no imports, no exports), not unlimited: an account JWT that
        # imports or exports must say how many it may.
        n_imports = int(limits.get("imports") or 0)
        n_exports = int(limits.get("exports") or 0)
        if not _limits_empty(limits) and n_imports >= 0 and len(imports) > n_imports:
            vr.add_error("the account contains more imports than allowed by the operator")
        if n_imports != NO_LIMIT and len(imports) > n_imports:
            vr.add_error("the account contains more imports than allowed by the operator")
        if n_exports != NO_LIMIT:
            if len(exports) > n_exports:
                vr.add_error("the account contains more exports than allowed by the operator")
            if not limits.get("wildcards"):
                for e in exports:
                    if isinstance(e, dict) and _has_wildcards(e.get("subject") or ""):
                        vr.add_error("the account contains wildcard exports that are not "
                                     "allowed by the operator")
        for key, scope in self.signing_keys().items():
            if scope is None:
                if not is_public_key(key, "A"):
                    vr.add_error("%s is not a valid account signing key" % go_quote(key))
            elif not is_public_key(key, "A"):
                vr.add_error("%s is not an account public key" % key)


def _limits_empty(limits):
    """jwt.OperatorLimits.IsEmpty: every limit 0 or false, no tiers."""
    return not any(v for k, v in limits.items() if k in _OPERATOR_LIMITS or k == "tiered_limits")


class ActivationClaims(Claims):
    """An activation token: the exporting account (or one of its signing
    keys, then ``issuer_account``) lets the account ``sub`` import
    ``subject`` of ``kind`` (jwt.ActivationClaims)."""

    kind = ACTIVATION
    expected_prefixes = ("A", "O")

    import_subject = property(lambda self: self.nats.get("subject") or "")
    import_type = property(lambda self: self.nats.get("kind") or "")
    issuer_account = property(lambda self: self.nats.get("issuer_account") or "")

    def validate(self, vr, now=None, time_checks=True):
        """validateWithTimeChecks: the kind, the subject, issuer_account."""
        if time_checks:
            super().validate(vr, now)
        if self.import_type not in ("stream", "service"):
            vr.add_error("invalid import type: %s" % _go_quote_or_nil(self.import_type))
        _validate_subject(self.import_subject, vr)
        ia = self.issuer_account
        if ia and not is_public_key(ia, "A"):
            vr.add_error("account_id is not an account public key")


class OperatorClaims(Claims):
    kind = OPERATOR
    expected_prefixes = ("O",)

    signing_keys = property(lambda self: list(self.nats.get("signing_keys") or ()))
    system_account = property(lambda self: self.nats.get("system_account") or "")
    strict_signing_key_usage = property(lambda self: bool(self.nats.get("strict_signing_key_usage")))
    account_server_url = property(lambda self: self.nats.get("account_server_url") or "")
    assert_server_version = property(lambda self: self.nats.get("assert_server_version") or "")

    def validate(self, vr, now=None):
        super().validate(vr, now)
        for k in self.signing_keys:
            if not is_public_key(k, "O"):
                vr.add_error("%s is not an operator public key" % k)
        sa = self.system_account
        if sa and not is_public_key(sa, "A"):
            vr.add_error("%s is not an account public key" % sa)


class GenericClaims(Claims):
    """Any other type (an activation, a delete request...): only its
    ClaimsData is read."""


_ACTIVATION_SPEC = dict(_CLAIMS_DATA, nats=dict(subject=_S.STR, kind=_S.STR, issuer_account=_S.STR,
                                                **_GENERIC))
_KINDS = {USER: (UserClaims, _USER_SPEC, "UserClaims"),
          ACTIVATION: (ActivationClaims, _ACTIVATION_SPEC, "ActivationClaims"),
          ACCOUNT: (AccountClaims, _ACCOUNT_SPEC, "AccountClaims"),
          OPERATOR: (OperatorClaims, _OPERATOR_SPEC, "OperatorClaims")}


# -- validation results --------------------------------------------------------------------


class ValidationResults:
    """jwt.ValidationResults: issues, some blocking, some time checks."""

    def __init__(self):
        self.issues = []  # (description, blocking, time_check)

    def add_error(self, text):
        self.issues.append((text, True, False))

    def add_time_check(self, text):
        self.issues.append((text, False, True))

    def add_warning(self, text):
        self.issues.append((text, False, False))

    def is_blocking(self, include_time_checks):
        return any(b or (include_time_checks and t) for _, b, t in self.issues)

    def errors(self):
        """The blocking issues' texts (Go's ``Errors()``)."""
        return [d for d, b, _ in self.issues if b]

    def __str__(self):
        return "&{Issues:[%s]}" % " ".join(d for d, _, _ in self.issues)


def _validate_subject(v, vr):
    if not isinstance(v, str) or v == "":
        vr.add_error("subject cannot be empty")
        return
    if " " in v:
        vr.add_error("subject %s cannot have spaces" % _go_quote_or_nil(v))
    if v[0] == "." or v[-1] == ".":
        vr.add_error("subject %s cannot start or end with a `.`" % _go_quote_or_nil(v))
    if ".." in v:
        vr.add_error("subject %s cannot contain consecutive `.`" % _go_quote_or_nil(v))


def _has_wildcards(subject):
    return any(t in ("*", ">") for t in subject.split("."))


def is_contained_in(subject, other):
    """jwt.Subject.IsContainedIn: is every subject ``subject`` matches also
    matched by ``other``?"""
    theirs = other.split(".")
    mine = subject.split(".")
    if len(mine) > len(theirs) and theirs[-1] != ">":
        return False
    if len(mine) < len(theirs):
        return False
    for i, tok in enumerate(theirs):
        if i == len(theirs) - 1 and tok == ">":
            return True
        if tok != mine[i] and tok != "*":
            return False
    return True


def _validate_renaming(local, subject, vr):
    """jwt.RenamingSubject.Validate: an import's ``local_subject``."""
    if local == "":
        vr.add_error("subject cannot be empty")
    if " " in local:
        vr.add_error("subject %s cannot have spaces" % _go_quote_or_nil(local))

    def gt(s):
        return s == ">" or s.endswith(".>")

    if gt(local) != gt(subject):
        vr.add_error("both, renaming subject and subject, need to end or not end in >")
    wildcards = subject.split(".").count("*")
    refs = 0
    for tk in local.split("."):
        if tk == "*":
            refs += 1
        elif len(tk) > 1 and tk[0] == "$" and tk[1:].isdigit():
            if int(tk[1:]) > wildcards:
                vr.add_error("Reference %s in %s reference * in %s that do not exist"
                             % (tk, _go_quote_or_nil(local), _go_quote_or_nil(subject)))
            else:
                refs += 1
    if refs != wildcards:
        vr.add_error("subject does not contain enough * or reference wildcards $[0-9]")


def validate_import(i, importer, vr, now=None):
    """jwt.Import.Validate for an import of account ``importer`` (its
    activation token checked, its expiry not)."""
    kind = i.get("type") or ""
    subject = i.get("subject") or ""
    if kind not in ("stream", "service"):
        vr.add_error("invalid import type: %s" % _go_quote_or_nil(kind))
    if kind == "service" and i.get("allow_trace"):
        vr.add_error("AllowTrace only valid for stream import")
    account = i.get("account") or ""
    if not account:
        vr.add_error("account to import from is not specified")
    elif not is_public_key(account, "A"):
        vr.add_error("account to import from is not a valid account public key")
    if i.get("to"):
        vr.add_warning("the field to has been deprecated (use LocalSubject instead)")
    _validate_subject(subject, vr)
    local = i.get("local_subject") or ""
    if local:
        _validate_renaming(local, subject, vr)
        if i.get("to"):
            vr.add_error("Local Subject replaces To")
    if i.get("share") and kind != "service":
        vr.add_error("sharing information (for latency tracking) is only valid for services: %s"
                     % _go_quote_or_nil(subject))
    token = i.get("token") or ""
    if not token:
        return None
    try:
        act = decode_activation(token)
    except JWTError:
        vr.add_error("import %s contains an invalid activation token" % _go_quote_or_nil(subject))
        return None
    if not (act.issuer == account or act.issuer_account == account):
        vr.add_error("activation token doesn't match account for import %s" % _go_quote_or_nil(subject))
    if act.subject != importer:
        vr.add_error("activation token doesn't match account it is being included in, %s"
                     % _go_quote_or_nil(subject))
    if act.import_type != kind:
        vr.add_error("mismatch between token import type %s and type of import %s"
                     % (act.import_type, kind))
    act.validate(vr, now, time_checks=False)
    subj = subject
    if kind == "service" and i.get("to"):
        subj = i.get("to")
    if not is_contained_in(subj, act.import_subject):
        vr.add_error("activation token import subject %s doesn't match import %s"
                     % (_go_quote_or_nil(act.import_subject), _go_quote_or_nil(subject)))
    return act


def validate_imports(imports, importer, vr):
    """jwt.Imports.Validate: each import, and service imports' local
    subjects must not overlap."""
    seen = []
    for i in imports:
        if not isinstance(i, dict):
            vr.add_error("null import is not allowed")
            continue
        if i.get("type") == "service":
            sub = i.get("to") or i.get("local_subject") or i.get("subject") or ""
            for k in seen:
                if is_contained_in(sub, k) or is_contained_in(k, sub):
                    vr.add_error("overlapping subject namespace for %s and %s"
                                 % (_go_quote_or_nil(sub), _go_quote_or_nil(k)))
            seen.append(sub)
        validate_import(i, importer, vr)


_RESPONSE_TYPES = ("", "Singleton", "Stream", "Chunked")


def validate_export(e, vr):
    """jwt.Export.Validate."""
    kind = e.get("type") or ""
    rt = e.get("response_type") or ""
    if kind not in ("stream", "service"):
        vr.add_error("invalid export type: %s" % _go_quote_or_nil(kind))
    if kind == "service" and rt not in _RESPONSE_TYPES:
        vr.add_error("invalid response type for service: %s" % _go_quote_or_nil(rt))
    if kind == "stream":
        if rt:
            vr.add_error("invalid response type for stream: %s" % _go_quote_or_nil(rt))
        if e.get("allow_trace"):
            vr.add_error("AllowTrace only valid for service export")
    threshold = e.get("response_threshold") or 0
    if threshold < 0:
        vr.add_error("negative response threshold is invalid")
    if threshold > 0 and kind != "service":
        vr.add_error("response threshold only valid for services")
    subject = e.get("subject") or ""
    _validate_subject(subject, vr)
    pos = e.get("account_token_position") or 0
    if pos > 0:
        if not _has_wildcards(subject):
            vr.add_error("Account Token Position can only be used with wildcard subjects: %s" % subject)
        else:
            tokens = subject.split(".")
            if pos > len(tokens):
                vr.add_error("Account Token Position %d exceeds length of subject '%s'" % (pos, subject))
            elif tokens[pos - 1] != "*":
                vr.add_error("Account Token Position %d matches '%s' but must match a * in: %s"
                             % (pos, tokens[pos - 1], subject))


def validate_exports(exports, vr):
    """jwt.Exports.Validate: each export, and no export of a kind inside
    another of the same kind."""
    by_kind = {"service": [], "stream": []}
    for e in exports:
        if not isinstance(e, dict):
            vr.add_error("null export is not allowed")
            continue
        by_kind["service" if e.get("type") == "service" else "stream"].append(e.get("subject") or "")
        validate_export(e, vr)
    for kind, subjects in by_kind.items():
        covered = {}
        for i, ns in enumerate(subjects):
            for j, s in enumerate(subjects):
                if i != j and is_contained_in(ns, s):
                    covered.setdefault(s, ns)
        for k, v in covered.items():
            vr.add_error("%s export subject %s already exports %s" % (kind, _go_quote_or_nil(k), _go_quote_or_nil(v)))


def _check_permission(subj, vr, permit_queue):
    tokens = subj.split(" ")
    if len(tokens) == 1:
        _validate_subject(tokens[0], vr)
    elif len(tokens) == 2:
        _validate_subject(tokens[0], vr)
        _validate_subject(tokens[1], vr)
        if not permit_queue:
            vr.add_error('Permission Subject "%s" is not allowed to contain queue' % subj)
    else:
        vr.add_error('Permission Subject "%s" contains too many spaces' % subj)


def validate_permissions(perms, vr):
    """jwt.Permissions.Validate over ``{"pub":..., "sub":..., "resp":...}``."""
    for which, queue in (("sub", True), ("pub", False)):
        p = perms.get(which) or {}
        for subj in list(p.get("allow") or ()) + list(p.get("deny") or ()):
            _check_permission(subj, vr, queue)


_HMS = re.compile(r"(\d{2}):(\d{2}):(\d{2})\Z")


def parse_clock(text):
    """Go's ``time.Parse("15:04:05", text)``: seconds of the day, or None."""
    m = _HMS.match(text or "")
    if not m:
        return None
    h, mi, s = (int(x) for x in m.groups())
    if h > 23 or mi > 59 or s > 59:
        return None
    return h * 3600 + mi * 60 + s


def cidr_list(value):
    """jwt.CIDRList from JSON: an array, or one comma-separated string."""
    if isinstance(value, str):
        out = []
        for v in value.lower().split(","):
            v = v.strip()
            if v and v not in out:
                out.append(v)
        return out
    return list(value or ())


def parse_cidr(text):
    """Go's ``net.ParseCIDR``: an ip_network (host bits allowed), or None."""
    if "/" not in text:
        return None
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def validate_limits(limits, vr):
    """jwt.Limits.Validate: source networks, time ranges, time zone."""
    for cidr in cidr_list(limits.get("src")):
        if parse_cidr(cidr) is None:
            vr.add_error("invalid cidr %s in user src limits" % _go_quote_or_nil(cidr))
    for tr in limits.get("times") or ():
        start, end = tr.get("start") or "", tr.get("end") or ""
        if not start:
            vr.add_error("time ranges start must contain a start")
        elif parse_clock(start) is None:
            vr.add_error("start in time range is invalid %s" % _go_quote_or_nil(start))
        if not end:
            vr.add_error("time ranges end must contain an end")
        elif parse_clock(end) is None:
            vr.add_error("end in time range is invalid %s" % _go_quote_or_nil(end))
    loc = limits.get("times_location") or ""
    if loc:
        if load_zone(loc) is None:
            vr.add_error("could not parse iana time zone by name: unknown time zone %s" % loc)


def load_zone(name):
    """The IANA time zone ``name`` (a user JWT's ``times_location``), or None."""
    try:
        import zoneinfo
        return zoneinfo.ZoneInfo(name)
    except Exception:
        return None


# -- decoding -------------------------------------------------------------------------------


def decode(token):
    """jwt.Decode: the claims of ``token`` once its header, payload and the
    issuer's signature check out; :class:`JWTError` with Go's text if not."""
    if not isinstance(token, str):
        raise JWTError("expected 3 chunks")
    chunks = token.split(".")
    if len(chunks) != 3:
        raise JWTError("expected 3 chunks")
    alg = _parse_header(chunks[0])
    data = _b64decode(chunks[1])
    version, claims = _load(data, token)
    sig = _b64decode(chunks[2])
    if version == -1:
        # A claim of no known type (a delete request...): the header's
        # algorithm says how it was signed, as jwt.DecodeGeneric has it.
        version = 2 if alg == ALGORITHM else 1
    if version <= 1:
        signed = chunks[1]
        failed = "claim failed V1 signature verification"
    else:
        signed = token[:len(chunks[0]) + len(chunks[1]) + 1]
        failed = "claim failed V2 signature verification"
    if not verify(claims.issuer, signed.encode(), sig):
        raise JWTError(failed)
    prefixes = claims.expected_prefixes
    if prefixes is not None and not any(is_public_key(claims.issuer, p) for p in prefixes):
        names = {"A": "account", "O": "operator", "U": "user", "N": "server"}
        raise JWTError("unable to validate expected prefixes - [%s]"
                       % " ".join(names[p] for p in prefixes))
    return claims


def _parse_header(chunk):
    header = _loads(_b64decode(chunk))
    if not isinstance(header, dict):
        raise JWTError("json: cannot unmarshal %s into Go value of type jwt.Header" % _json_kind(header))
    typ, alg = header.get("typ"), header.get("alg")
    for key, v in (("typ", typ), ("alg", alg)):
        if v is not None and not isinstance(v, str):
            raise JWTError("json: cannot unmarshal %s into Go struct field Header.%s of type string"
                           % (_json_kind(v), key))
    typ, alg = typ or "", alg or ""
    if typ.upper() != "JWT":
        raise JWTError("not supported type %s" % _go_quote_or_nil(typ))
    low = alg.lower()
    if not low.startswith(_ALGORITHM_V1) or low not in (_ALGORITHM_V1, ALGORITHM):
        raise JWTError("unexpected %s algorithm" % _go_quote_or_nil(alg))
    return low


def _load(data, token):
    payload = _loads(data)
    if not isinstance(payload, dict):
        raise JWTError("json: cannot unmarshal %s into Go value of type jwt.identifier"
                       % _json_kind(payload))
    top_type = payload.get("type")
    nats = payload.get("nats")
    if top_type is not None and not isinstance(top_type, str):
        raise JWTError("json: cannot unmarshal %s into Go struct field identifier.type of type "
                       "jwt.ClaimType" % _json_kind(top_type))
    if nats is not None and not isinstance(nats, dict):
        raise JWTError("json: cannot unmarshal %s into Go struct field identifier.nats of type "
                       "jwt.GenericFields" % _json_kind(nats))
    nats = nats or {}
    if top_type:
        kind, version = top_type, 1
    else:
        kind = nats.get("type") or ""
        version = nats.get("version") or 0
        if isinstance(version, bool) or not isinstance(version, int):
            raise JWTError("json: cannot unmarshal %s into Go struct field identifier.nats.version "
                           "of type int" % _json_kind(version))
    if version > LIB_VERSION:
        raise JWTError("JWT was generated by a newer version ")
    if kind in ("cluster", "server"):
        raise JWTError("%sClaims are not supported" % kind.capitalize())
    entry = _KINDS.get(kind)
    if entry is None:
        _Schema("GenericClaims").check(payload, _GENERIC_SPEC, [])
        return -1, GenericClaims(payload, version, token)
    cls, spec, struct = entry
    if version == 1:
        payload = _migrate_v1(kind, payload)
    elif version != 2:
        raise JWTError("library supports version %d or less - received %d" % (LIB_VERSION, version))
    _Schema(struct).check(payload, spec, [])
    return version, cls(payload, version, token)


# -- v1 claims, as jwt v2 migrates them ----------------------------------------------------
#
# A v1 JWT (a top-level "type", no "nats.version": what nsc wrote before
# NATS 2.2, and what many fixtures still carry) keeps "type", "tags" and
# "issuer_account" at the top level and fewer claims under "nats". jwt v2's
# loadUser/loadAccount/loadOperator/loadActivation read it into their v1
# structs and migrate it: only the claims v1 had survive (anything else
# under "nats" is ignored), and what v1 left out means what the v1 struct's
# preset says, not v2's zero value. A v1 user that says nothing of its
# limits is unlimited (v2's zero would be no subscriptions at all).

_V1_USER_KEYS = ("pub", "sub", "resp", "src", "times", "times_location", "subs", "data",
                 "payload", "bearer_token")
# (loadUser: v1a.Limits = NatsLimits{NoLimit, NoLimit, NoLimit} before Unmarshal.)
_V1_USER_PRESET = {"subs": NO_LIMIT, "data": NO_LIMIT, "payload": NO_LIMIT}
_V1_ACCOUNT_KEYS = ("imports", "exports", "limits", "signing_keys", "revocations")
# (v1NatsAccount.Limits: NatsLimits and AccountLimits; JetStream limits are
# zeroed by the migration: v1 accounts have no JetStream.)
_V1_ACCOUNT_LIMITS = ("subs", "data", "payload", "imports", "exports", "wildcards",
                      "disallow_bearer", "conn", "leaf")
_V1_OPERATOR_KEYS = ("signing_keys", "account_server_url", "operator_service_urls",
                     "system_account")


def _migrate_v1(kind, payload):
    """The payload of a v1 JWT of ``kind`` as jwt v2 sees it once migrated
    (v2's layout, ``nats.version`` still 1)."""
    old = payload.get("nats") or {}
    if kind == USER:
        _Schema("v1UserClaims").check(payload, {"nats": {"max": _S.INT}}, [])
        nats = {k: old[k] for k in _V1_USER_KEYS if old.get(k) is not None}
        for k, v in _V1_USER_PRESET.items():
            nats.setdefault(k, v)
        moved = ("type", "tags", "issuer_account")
    elif kind == ACCOUNT:
        keys = old.get("signing_keys")
        if isinstance(keys, list):
            for v in keys:
                if v is not None and not isinstance(v, str):
                    raise JWTError("json: cannot unmarshal %s into Go struct field "
                                   "v1AccountClaims.nats.signing_keys of type string" % _json_kind(v))
        nats = {k: old[k] for k in _V1_ACCOUNT_KEYS if old.get(k) is not None}
        limits = nats.get("limits")
        if isinstance(limits, dict):
            nats["limits"] = {k: limits[k] for k in _V1_ACCOUNT_LIMITS if k in limits}
        moved = ("type", "tags")
    elif kind == OPERATOR:
        nats = {k: old[k] for k in _V1_OPERATOR_KEYS if old.get(k) is not None}
        moved = ("type", "tags")
    else:  # ACTIVATION: v1's "nats.type" is the import's kind
        _Schema("v1ActivationClaims").check(payload, {"nats": {"type": _S.STR, "max": _S.INT,
                                                                "payload": _S.INT, "src": _S.STR,
                                                                "times": [_TIME_RANGE]}}, [])
        nats = {}
        if old.get("subject") is not None:
            nats["subject"] = old["subject"]
        if old.get("type"):
            nats["kind"] = old["type"]
        moved = ("type", "tags", "issuer_account")
    for k in moved:
        if payload.get(k) is not None:
            nats[k] = payload[k]
    nats["version"] = 1
    return dict(payload, nats=nats)


def encode_v1(kind, subject, signer, nats=None, name="", expires=0, issued_at=None, tags=None,
              issuer_account=""):
    """A v1 JWT, as jwt v1 (nsc before NATS 2.2) encoded one: header
    ``{"typ":"jwt","alg":"ed25519"}``, ``type``, ``tags`` and (users)
    ``issuer_account`` at the top level, ``nats`` without type or version,
    the signature over the payload alone. For tests and fixtures."""
    issuer = public_key_of(signer)
    data = {"exp": expires, "jti": "", "iat": int(time.time()) if issued_at is None else issued_at,
            "iss": issuer, "name": name, "sub": subject, "tags": tags or None, "type": kind}
    data = {k: v for k, v in data.items() if v}
    digest = hashlib.new("sha512_256", json.dumps(data, separators=(",", ":")).encode()).digest()
    data["jti"] = base64.b32encode(digest).rstrip(b"=").decode()
    order = ("aud", "exp", "jti", "iat", "iss", "name", "nbf", "sub", "tags", "type")
    ordered = {k: data[k] for k in order if k in data}
    ordered["nats"] = dict(nats or {})
    if issuer_account:
        ordered["issuer_account"] = issuer_account
    header = _b64encode(json.dumps({"typ": "jwt", "alg": _ALGORITHM_V1}, separators=(",", ":")).encode())
    payload = _b64encode(json.dumps(ordered, separators=(",", ":")).encode())
    return "%s.%s.%s" % (header, payload, _b64encode(signer.sign(payload.encode())))


def _decode_kind(token, cls, what):
    claims = decode(token)
    if not isinstance(claims, cls):
        raise JWTError("not %s claim" % what)
    return claims


def decode_user(token):
    """jwt.DecodeUserClaims."""
    return _decode_kind(token, UserClaims, "user")


def decode_account(token):
    """jwt.DecodeAccountClaims."""
    return _decode_kind(token, AccountClaims, "account")


def decode_operator(token):
    """jwt.DecodeOperatorClaims."""
    return _decode_kind(token, OperatorClaims, "operator")


def decode_activation(token):
    """jwt.DecodeActivationClaims."""
    return _decode_kind(token, ActivationClaims, "activation")


def decode_generic(token):
    """jwt.DecodeGeneric: any JWT, its ClaimsData and raw ``nats`` data."""
    return decode(token)


_AUTHORIZATION_RESPONSE_SPEC = dict(_CLAIMS_DATA, nats=dict(jwt=_S.STR, error=_S.STR, issuer_account=_S.STR,
                                                           **_GENERIC))


def decode_authorization_response(token):
    """The header, payload and account signature of an auth callout
    service's answer (jwt.DecodeAuthorizationResponseClaims, up to its
    ``type``, which the caller checks); :class:`JWTError` with Go's text.
    (:func:`decode` reads only the kinds operator mode needs.)"""
    chunks = token.split(".")
    if len(chunks) != 3:
        raise JWTError("expected 3 chunks")
    _parse_header(chunks[0])
    payload = _loads(_b64decode(chunks[1]))
    if not isinstance(payload, dict):
        raise JWTError("json: cannot unmarshal %s into Go value of type jwt.identifier" % _json_kind(payload))
    _Schema("AuthorizationResponseClaims").check(payload, _AUTHORIZATION_RESPONSE_SPEC, [])
    sig = _b64decode(chunks[2])
    claims = GenericClaims(payload, LIB_VERSION, token)
    signed = token[:len(chunks[0]) + len(chunks[1]) + 1]
    if not verify(claims.issuer, signed.encode(), sig):
        raise JWTError("claim failed V2 signature verification")
    if not is_public_key(claims.issuer, "A"):
        raise JWTError("unable to validate expected prefixes - [account]")
    return claims


# -- decorated files (nsc's .creds and .jwt) ------------------------------------------------

_DECORATED = re.compile(r"\s*(?:(?:-{3,}.*-{3,}\r?\n)([\w\-.=]+)(?:\r?\n-{3,}.*-{3,}(\r?\n|\Z)))")


def parse_decorated(text):
    """jwt.ParseDecoratedJWT: the first JWT between nsc's ``-----BEGIN
    ...-----`` lines, or the whole text if it has none."""
    m = _DECORATED.search(text)
    if m is None:
        return text
    return m.group(1).strip()


def parse_decorated_seed(text):
    """The seed in a ``.creds`` file (the second decorated block)."""
    blocks = _DECORATED.findall(text)
    return blocks[1][0].strip() if len(blocks) > 1 else None


def format_user_config(user_jwt, seed):
    """A ``.creds`` file, as ``jwt.FormatUserConfig`` (and nsc) writes it."""
    return ("-----BEGIN NATS USER JWT-----\n%s\n------END NATS USER JWT------\n\n"
            "************************* IMPORTANT *************************\n"
            "NKEY Seed printed below can be used to sign and prove identity.\n"
            "NKEYs are sensitive and should be treated as secrets.\n\n"
            "-----BEGIN USER NKEY SEED-----\n%s\n------END USER NKEY SEED------\n\n"
            "*************************************************************\n") % (user_jwt, seed)


# -- encoding ---------------------------------------------------------------------------------

_CLAIMS_ORDER = ("aud", "exp", "jti", "iat", "iss", "name", "nbf", "sub")


def encode(kind, subject, signer, nats=None, name="", expires=0, not_before=0,
           issued_at=None, audience=""):
    """A JWT of ``kind`` for ``subject``, signed by the KeyPair ``signer``
    (nkeys), as the Go library encodes one: ``iat`` now, ``jti`` the
    base32 of the SHA-512/256 of the claims data, ``nats.type`` and
    ``nats.version`` 2. ``nats`` holds the rest (Go's JSON names)."""
    issuer = public_key_of(signer)
    data = {"aud": audience, "exp": expires, "jti": "", "iat": int(time.time()) if issued_at is None
            else issued_at, "iss": issuer, "name": name, "nbf": not_before, "sub": subject}
    data = {k: data[k] for k in _CLAIMS_ORDER if data[k]}
    digest = hashlib.new("sha512_256", json.dumps(data, separators=(",", ":")).encode()).digest()
    jti = base64.b32encode(digest).rstrip(b"=").decode()
    ordered = {}
    for k in _CLAIMS_ORDER:
        if k == "jti":
            ordered["jti"] = jti
        elif k in data:
            ordered[k] = data[k]
    body = dict(nats or {})
    body["type"] = kind
    body["version"] = LIB_VERSION
    ordered["nats"] = body
    header = _b64encode(json.dumps({"typ": "JWT", "alg": ALGORITHM}, separators=(",", ":")).encode())
    payload = _b64encode(json.dumps(ordered, separators=(",", ":")).encode())
    signed = "%s.%s" % (header, payload)
    return "%s.%s" % (signed, _b64encode(signer.sign(signed.encode())))


def user_nats(pub=None, sub=None, resp=None, subs=NO_LIMIT, data=NO_LIMIT, payload=NO_LIMIT,
              **extra):
    """A user's ``nats`` claims as ``jwt.NewUserClaims`` starts them (limits
    unlimited), with ``pub``/``sub`` permission dicts and anything else in
    ``extra`` (``bearer_token``, ``src``, ``times``, ``issuer_account``...)."""
    out = {}
    if pub:
        out["pub"] = pub
    if sub:
        out["sub"] = sub
    if resp:
        out["resp"] = resp
    out.update(subs=subs, data=data, payload=payload)
    out.update(extra)
    return out


def account_nats(conn=NO_LIMIT, subs=NO_LIMIT, data=NO_LIMIT, payload=NO_LIMIT, leaf=NO_LIMIT,
                 imports=NO_LIMIT, exports=NO_LIMIT, limits=None, **extra):
    """An account's ``nats`` claims as ``jwt.NewAccountClaims`` starts them
    (limits unlimited, wildcard exports allowed), more ``limits`` (e.g.
    ``disallow_bearer``), plus ``extra`` (``signing_keys``, ``revocations``,
    ``default_permissions``...)."""
    out = {"limits": {"subs": subs, "data": data, "payload": payload, "imports": imports,
                      "exports": exports, "wildcards": True, "conn": conn, "leaf": leaf,
                      "mem_storage": 0, "disk_storage": 0, "streams": 0, "consumer": 0}}
    out["limits"].update(limits or {})
    out.update(extra)
    return out
