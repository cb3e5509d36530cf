"""Exports and imports between accounts, checked as nats-server checks them.

Sans-IO. :func:`resolve` takes the configured accounts and gives back what the
broker wires up (:class:`Resolution`) and the errors nats-server would stop on,
in its words and in its order (server/opts.go parseAccounts: stream exports,
service exports, stream imports, service imports; server/accounts.go for the
rules: ``checkStreamImportAuthorized``, ``AddMappedStreamImportWithClaim``,
``addServiceImportWithClaim``, the cycle checks).

Names follow nats-server, whose ``from``/``to`` swap meaning between the two
kinds of import, so here every import has ``local`` (the subject the
importing account uses) and ``remote`` (the subject in the exporting account):

* a stream import's ``remote`` is nats-server's ``from``, its ``local`` is ``to``;
* a service import's ``local`` is nats-server's ``from``, its ``remote`` is ``to``.

Where nats-server's outcome depends on Go's random map order (which of two
exports covering an import decides, which import of a cycle is reported),
accounts and exports are taken in file order.
"""

import attrs

from natsbroker.config.model import ServiceExport, ServiceImport, StreamExport, StreamImport
from natsbroker.gocompat.quote import go_quote
from natsbroker.subjects.sublist import is_literal, is_valid_subject, subject_is_subset_match, subjects_collide
from natsbroker.subjects.transform import SubjectTransform, TransformError, transform_untokenize

# nats-server's error texts (server/errors.go).
ERR_STREAM_IMPORT_AUTH = "stream import not authorized"
ERR_SERVICE_IMPORT_AUTH = "service import not authorized"
ERR_STREAM_IMPORT_BAD_PREFIX = "stream import prefix can not contain wildcard tokens"
ERR_STREAM_IMPORT_DUPLICATE = "stream import already exists"
ERR_IMPORT_FORMS_CYCLE = "import forms a cycle"
ERR_CYCLE_SEARCH_DEPTH = "search cycle depth exhausted"
ERR_INVALID_SUBJECT = "sublist: invalid subject"

MAX_CYCLE_SEARCH_DEPTH = 1024  # MaxAccountCycleSearchDepth

SINGLETON, STREAMED, CHUNKED = "Singleton", "Stream", "Chunked"

__all__ = ["CHUNKED", "SINGLETON", "STREAMED", "ExportAuth", "Refused", "Resolution",
           "ResolvedServiceImport", "ResolvedStreamImport", "ServiceExportRule", "resolve",
           "service_export_for", "subjects_collide", "transform_tokenize"]


class Refused(ValueError):
    """An export or import nats-server refuses (``str()``: its error text)."""


@attrs.define(eq=False)
class ExportAuth:
    """Who may import an export (nats-server's exportAuth, config mode):
    ``approved`` account names (empty: everyone) and ``token_pos``, the
    1-based token of the import subject that must be the importer's name."""

    approved: set = attrs.field(factory=set)
    token_pos: int = 0
    # Account JWT exports: ``token_req`` (an importer needs an activation
    # token, which ``check_token(importer, claim, auth)`` judges) and the
    # activations revoked (``revocations``: subject -> time).
    token_req: bool = False
    revocations: dict = attrs.field(factory=dict)
    check_token: object = None

    def allows(self, account, tokens, claim=None):
        # checkAuth: public, then the account token position, then an
        # activation token, then the list.
        if not self.approved and not self.token_pos and not self.token_req:
            return True
        if self.token_pos:
            return self.token_pos <= len(tokens) and tokens[self.token_pos - 1] == account
        if self.token_req:
            return self.check_token is not None and self.check_token(account, claim, self)
        return account in self.approved


@attrs.define(eq=False)
class ServiceExportRule(ExportAuth):
    """A service export: its auth, response type and response threshold."""

    account: str = ""
    subject: str = ""
    response_type: str = SINGLETON
    threshold: float = 120.0


@attrs.define(eq=False)
class ResolvedStreamImport:
    """A stream import as the broker applies it: messages published in
    ``exporter`` under ``remote`` reach subscribers of ``importer`` under
    ``local`` (through ``transform`` when the remote subject has wildcards
    and the local one differs; ``use_pub``: the subject is kept)."""

    importer: str
    exporter: str
    remote: str
    local: str
    transform: object = None  # SubjectTransform remote -> local
    use_pub: bool = False


@attrs.define(eq=False)
class ResolvedServiceImport:
    """A service import: requests published in ``importer`` to ``local`` go
    to ``exporter`` under ``remote`` (through ``transform``, local ->
    remote, or kept as published when ``use_pub``)."""

    importer: str
    exporter: str
    local: str
    remote: str
    export: ServiceExportRule = None
    transform: object = None
    use_pub: bool = False
    share: bool = False


@attrs.define
class Resolution:
    """Everything :func:`resolve` accepted, per account name."""

    stream_exports: dict = attrs.field(factory=dict)  # name -> {subject: ExportAuth}
    service_exports: dict = attrs.field(factory=dict)  # name -> {subject: ServiceExportRule}
    stream_imports: dict = attrs.field(factory=dict)  # name -> [ResolvedStreamImport]
    service_imports: dict = attrs.field(factory=dict)  # name -> [ResolvedServiceImport]


# -- subject helpers (nats-server's, where ours differ) -----------------------------


def _tokens(subject):
    return subject.split(".")


# nats-server's subjectIsSubsetMatch(subject, pattern).
_subset = subject_is_subset_match


def _valid(subject):
    return is_valid_subject(subject.encode())


def _literal(subject):
    return is_literal(subject.encode())


def _has_wildcard(subject):
    return not _literal(subject)


def transform_tokenize(subject):
    """transformTokenize: each ``*`` token becomes ``$1``, ``$2``..."""
    out, i = [], 1
    for t in _tokens(subject):
        if t == "*":
            out.append("$%d" % i)
            i += 1
        else:
            out.append(t)
    return ".".join(out)


# -- resolution ------------------------------------------------------------------------


class _Account:
    """One account's state while imports are being added (nats-server's
    Account, as far as these rules look at it)."""

    def __init__(self, name):
        self.name = name
        self.streams = {}  # exported stream subject -> ExportAuth (file order)
        self.services = {}  # exported service subject -> ServiceExportRule
        self.stream_imports = []
        self.service_imports = []


def resolve(accounts):
    """Check and resolve the exports and imports of ``accounts`` (a list of
    :class:`~natsbroker.config.model.AccountConfig`). Returns ``(resolution,
    errors)``: every error as nats-server words it (without the position
    it puts in front), in its order; what failed is left out."""
    errors = []
    accs = {a.name: _Account(a.name) for a in accounts}
    for kind, cls in (("stream", StreamExport), ("service", ServiceExport)):
        for acfg in accounts:
            acc = accs[acfg.name]
            for e in acfg.exports:
                if not isinstance(e, cls):
                    continue
                approved = []
                for an in e.accounts:
                    if an not in accs:
                        errors.append(f"{go_quote(an)} account not defined for {kind} export")
                        continue
                    approved.append(an)
                try:
                    _add_export(acc, e, kind, approved)
                except Refused as err:
                    errors.append(f"Error adding {kind} export {go_quote(e.subject)}: {err}")
    # Every account's stream imports, then every account's service imports
    # (the order of nats-server's errors).
    for kind, cls, add in (("stream", StreamImport, add_stream_import),
                           ("service", ServiceImport, add_service_import)):
        for acfg in accounts:
            acc = accs[acfg.name]
            for i in acfg.imports:
                if not isinstance(i, cls):
                    continue
                exporter = accs.get(i.account)
                if exporter is None:
                    errors.append(f"{go_quote(i.account)} account not defined for {kind} import")
                    continue
                try:
                    add(acc, exporter, i, accs)
                except Refused as err:
                    errors.append(f"Error adding {kind} import {go_quote(i.subject)}: {err}")
    res = Resolution()
    for name, acc in accs.items():
        if acc.streams:
            res.stream_exports[name] = acc.streams
        if acc.services:
            res.service_exports[name] = acc.services
        if acc.stream_imports:
            res.stream_imports[name] = acc.stream_imports
        if acc.service_imports:
            res.service_imports[name] = acc.service_imports
    return res, errors


def _set_auth(auth, subject, approved, token_pos):
    # setExportAuth. An export named again adds to the one before: a later
    # public entry does not open a restricted export (nats-server keeps it).
    if token_pos > 0:
        toks = _tokens(subject)
        if len(toks) < token_pos or toks[token_pos - 1] != "*":
            raise Refused(ERR_INVALID_SUBJECT)
    auth.token_pos = token_pos
    auth.approved.update(approved)


def _add_export(acc, e, kind, approved):
    pos = getattr(e, "account_token_position", 0) or 0
    if kind == "stream":
        auth = acc.streams.get(e.subject)
        if auth is None:
            auth = ExportAuth()
        if approved or pos:
            _set_auth(auth, e.subject, approved, pos)
        acc.streams[e.subject] = auth
        return
    rule = acc.services.get(e.subject)
    if rule is None:
        rule = ServiceExportRule(account=acc.name, subject=e.subject)
    if e.response_type != SINGLETON:
        rule.response_type = e.response_type
    if approved or pos:
        _set_auth(rule, e.subject, approved, pos)
    rule.threshold = e.response_threshold
    acc.services[e.subject] = rule


def _approved(exports, importer, subject, claim=None):
    """check{Stream,Service}ExportApproved: the export with the import's
    subject, else the first one containing it (``claim``: the import's
    account JWT entry, for its activation token)."""
    auth = exports.get(subject)
    if auth is not None:
        return auth.allows(importer, [], claim)
    toks = _tokens(subject)
    for esubj, auth in exports.items():
        if _subset(subject, esubj):
            return auth.allows(importer, toks, claim)
    return False


def service_export_for(exports, subject):
    """getServiceExport: the export of ``subject``, or the first wildcard
    export containing it."""
    rule = exports.get(subject)
    if rule is not None:
        return rule
    for esubj, rule in exports.items():
        if _subset(subject, esubj):
            return rule
    return None


def add_stream_import(acc, exporter, i, accs):
    remote = i.subject
    if not exporter.streams or not _valid(remote) or not _approved(
            exporter.streams, acc.name, remote, getattr(i, "claim", None)):
        raise Refused(ERR_STREAM_IMPORT_AUTH)
    if i.prefix:
        # AddStreamImportWithClaim: a literal prefix, put in front of the subject.
        prefix = i.prefix
        if not _literal(prefix):
            raise Refused(ERR_STREAM_IMPORT_BAD_PREFIX)
        if not prefix.endswith("."):
            prefix += "."
        local = prefix + remote
    else:
        local = i.to or remote
    # AddMappedStreamImportWithClaim
    _stream_cycle(acc, exporter, local, accs)
    _stream_cycle(acc, exporter, remote, accs)
    transform, use_pub = None, False
    if _has_wildcard(remote):
        if local == remote:
            use_pub = True
        else:
            try:
                transform = SubjectTransform.compile(remote, transform_tokenize(local), strict=True)
            except TransformError as e:
                raise Refused(
                    f"failed to create mapping transform for stream import subject from "
                    f"{go_quote(remote)} to {go_quote(local)}: {e}") from None
            local = transform_untokenize(local)
    for si in acc.stream_imports:
        if si.exporter == exporter.name and si.remote == remote:
            raise Refused(ERR_STREAM_IMPORT_DUPLICATE)
    acc.stream_imports.append(ResolvedStreamImport(acc.name, exporter.name, remote, local,
                                                   transform, use_pub))


def _stream_cycle(acc, dest, to, accs):
    # streamImportFormsCycle / checkStreamImportsForCycles.
    _check_stream_cycles(dest, to, {acc.name}, accs)


def _check_stream_cycles(acc, to, visited, accs):
    if len(visited) >= MAX_CYCLE_SEARCH_DEPTH:
        raise Refused(ERR_CYCLE_SEARCH_DEPTH)
    if not any(_subset(to, s) for s in acc.streams):
        return
    for si in list(acc.stream_imports):
        if subjects_collide(to, si.local):
            if si.exporter in visited:
                raise Refused(ERR_IMPORT_FORMS_CYCLE)
            visited.add(acc.name)
            if _subset(si.local, to):
                to = si.local
            _check_stream_cycles(accs[si.exporter], to, visited, accs)


def add_service_import(acc, exporter, i, accs):
    # AddServiceImport(destination, from=to or subject, to=subject)
    local = i.to or i.subject
    remote = i.subject
    if not _valid(local) or not _valid(remote):
        raise Refused(ERR_INVALID_SUBJECT)
    if not exporter.services or not _approved(exporter.services, acc.name, remote,
                                              getattr(i, "claim", None)):
        raise Refused(ERR_SERVICE_IMPORT_AUTH)
    # serviceImportFormsCycle
    _check_service_cycles(exporter, local, {acc.name}, accs)
    # addServiceImport
    for dup in acc.service_imports:
        if dup.local == local:
            raise Refused(f"duplicate service import subject {go_quote(local)}, previously "
                               f"used in import for account {go_quote(dup.exporter)}, subject "
                               f"{go_quote(dup.remote)}")
    transform, use_pub = None, False
    if _has_wildcard(remote):
        if remote == local:
            use_pub = True
        else:
            try:
                tr = SubjectTransform.compile(remote, transform_tokenize(local), strict=True)
            except TransformError as e:
                raise Refused(
                    f"failed to create mapping transform for service import subject from "
                    f"{go_quote(local)} to {go_quote(remote)}: {e}") from None
            local = transform_untokenize(local)
            transform = tr.reverse()
    export = service_export_for(exporter.services, remote)
    acc.service_imports.append(ResolvedServiceImport(acc.name, exporter.name, local, remote, export,
                                                     transform, use_pub, i.share))


def _check_service_cycles(acc, frm, visited, accs):
    # checkServiceImportsForCycles: does ``acc`` pass ``frm`` on to an
    # account already on the path?
    if len(visited) >= MAX_CYCLE_SEARCH_DEPTH:
        raise Refused(ERR_CYCLE_SEARCH_DEPTH)
    for si in list(acc.service_imports):
        if subjects_collide(frm, si.remote):
            if si.exporter in visited:
                raise Refused(ERR_IMPORT_FORMS_CYCLE)
            visited.add(acc.name)
            if _subset(si.local, frm):
                frm = si.local
            _check_service_cycles(accs[si.exporter], frm, visited, accs)
