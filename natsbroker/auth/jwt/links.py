"""Exports and imports of account JWTs, wired at run time.

An account JWT's ``exports`` and ``imports`` are nats-server's
(server/accounts.go ``updateAccountClaimsWithRefresh``): the exports are
made when the account is loaded or its JWT changes; its imports are then
wired again from scratch (the exporting accounts looked up, loaded if need
be), and so are the imports of every loaded account that imports from it
(an exporter loaded or changed after its importer). The rules an import
must pass are :mod:`natsbroker.accounts.exports`' (the config file's), with one
more: an export with ``token_req`` wants an activation token, a JWT the
exporter issued to the importing account (``checkActivation``). An import
that fails is left out, with nats-server's debug line; an activation that
expires later takes its import away then (a reactor timer).
"""

import time

import attrs
from twisted.logger import Logger

from natsbroker.accounts import exports as X, imports as I
from natsbroker.auth.jwt import claims as C
from natsbroker.gocompat.quote import go_quote

log = Logger()

# DEFAULT_SERVICE_EXPORT_RESPONSE_THRESHOLD
_THRESHOLD = 120.0
_RESPONSE_TYPES = {"Stream": X.STREAMED, "Chunked": X.CHUNKED}


@attrs.define
class JwtStreamImport:
    """A stream import of an account JWT, in the shape the export rules
    take (:class:`~natsbroker.config.model.StreamImport`'s fields): ``claim`` is
    the JWT's import entry (its activation ``token``)."""

    account: str
    subject: str
    prefix: str = ""
    to: str = ""
    claim: dict = None


@attrs.define
class JwtServiceImport:
    """A service import of an account JWT (``subject``: the exported
    subject, ``to``: the importer's), as :class:`JwtStreamImport`."""

    account: str
    subject: str
    to: str = ""
    share: bool = False
    claim: dict = None


def make_exports(operator, jacc):
    """``(streams, services)`` of ``jacc``'s JWT, as nats-server's
    addStreamExportWithAccountPos / addServiceExportWithResponseAndAccountPos
    make them (an export they refuse is left out, with their debug line)."""
    streams, services = {}, {}
    label = jacc.trace_label

    def check(importer, claim, auth):
        return check_activation(operator, jacc, importer, claim, auth)

    for e in jacc.claims.nats.get("exports") or ():
        if not isinstance(e, dict):
            continue
        subject = e.get("subject") or ""
        kind = e.get("type")
        pos = int(e.get("account_token_position") or 0)
        token_req = bool(e.get("token_req"))
        if kind == "stream":
            log.debug("Adding stream export {s} for {a}", s=go_quote(subject), a=label)
            auth = streams.get(subject) or X.ExportAuth()
        elif kind == "service":
            log.debug("Adding service export {s} for {a}", s=go_quote(subject), a=label)
            auth = services.get(subject) or X.ServiceExportRule(account=jacc.name, subject=subject)
            rt = _RESPONSE_TYPES.get(e.get("response_type") or "")
            if rt is not None:
                auth.response_type = rt
        else:
            continue
        if token_req or pos:
            # setExportAuth
            if pos:
                toks = subject.split(".")
                if len(toks) < pos or toks[pos - 1] != "*":
                    log.debug("Error adding {k} export to account [{a}]: {e}", k=kind, a=label,
                              e=X.ERR_INVALID_SUBJECT)
                    continue
            auth.token_pos = pos
            if token_req:
                auth.token_req = True
        auth.check_token = check
        auth.revocations = dict(e.get("revocations") or {})
        if kind == "stream":
            streams[subject] = auth
        else:
            threshold = int(e.get("response_threshold") or 0)
            auth.threshold = threshold / 1e9 if threshold else _THRESHOLD
            services[subject] = auth
    return streams, services


def check_activation(operator, exporter, importer, claim, auth, timer=True):
    """nats-server's checkActivation: does the import entry ``claim`` of
    account ``importer`` carry a valid activation token from ``exporter``,
    not revoked by ``auth``? (An expiring one is checked again when it
    expires.)"""
    token = (claim or {}).get("token") or ""
    if not token:
        return False
    vr = C.ValidationResults()
    C.validate_import(claim, importer, vr)
    if vr.is_blocking(True):
        return False
    try:
        act = C.decode_activation(token)
    except C.JWTError:
        return False
    # isIssuerClaimTrusted
    if act.issuer_account:
        if act.issuer_account != exporter.name:
            log.error('Invalid issuer account "{ia}" in activation claim (subject: "{s}" - type: '
                      '"{t}") for account "{a}"', ia=act.issuer_account, s=act.import_subject,
                      t=act.import_type, a=exporter.name)
            return False
        if not exporter.has_issuer(act.issuer)[0]:
            return False
    vr = C.ValidationResults()
    act.validate(vr)
    if vr.is_blocking(True):
        return False
    if act.expires:
        left = act.expires - time.time()
        if left <= 0:
            return False
        if timer:
            operator.activation_expires(importer, left)
    if auth is None:
        return True
    return not _revoked(auth.revocations, act.subject, act.issued_at)


def _revoked(revocations, subject, issued_at):
    if not revocations:
        return False
    t = revocations.get(subject)
    if t is None or t < issued_at:
        t = revocations.get("*")
        if t is None or t < issued_at:
            return False
    return True


def imports_from(jacc, exporter_name):
    """Does ``jacc``'s JWT import anything from ``exporter_name``?"""
    return any(isinstance(i, dict) and i.get("account") == exporter_name
               for i in jacc.claims.nats.get("imports") or ())


def wire(operator, jacc):
    """Wire ``jacc``'s imports anew from its JWT (the old ones go first).
    Returns the imports that could not be wired (nats-server's
    ``incompleteImports``)."""
    account = jacc.account
    broker = operator.broker
    I.unwire(account)
    jacc.stream_imports = []
    jacc.service_imports = []
    entries = [i for i in jacc.claims.nats.get("imports") or () if isinstance(i, dict)]
    if not entries:
        return []
    runtime = I.runtime_of(broker)
    label = jacc.trace_label
    incomplete = []
    for i in entries:
        name = i.get("account") or ""
        subject = i.get("subject") or ""
        kind = i.get("type") or ""
        exporter, why = operator.lookup_account(name)
        if exporter is None:
            log.error("Can't locate account [{a}] for import of [{s}] {k} (err={e})", a=name,
                      s=subject, k=kind, e=why)
            incomplete.append(i)
            continue
        to = i.get("to") or ""
        local = i.get("local_subject") or ""
        if kind == "stream":
            shown = local or to
            log.debug('Adding stream import {e}:"{f}" for {a}:"{t}"', e=exporter.trace_label,
                      f=subject, a=label, t=shown)
            if local:
                ji = JwtStreamImport(name, subject, to=local, claim=i)
            else:
                ji = JwtStreamImport(name, subject, prefix=to, claim=i)
            try:
                X.add_stream_import(jacc, exporter, ji, operator.accounts)
            except X.Refused as e:
                log.debug("Error adding stream import to account [{a}]: {e}", a=label, e=e)
                incomplete.append(i)
                continue
            I.add_stream_import(runtime, account, exporter.account, jacc.stream_imports[-1])
        elif kind == "service":
            frm, remote = subject, to
            if local:
                frm, remote = local, subject
            log.debug('Adding service import {e}:"{f}" for {a}:"{t}"', e=exporter.trace_label,
                      f=frm, a=label, t=remote)
            ji = JwtServiceImport(name, remote or frm, to=frm, share=bool(i.get("share")), claim=i)
            try:
                X.add_service_import(jacc, exporter, ji, operator.accounts)
            except X.Refused as e:
                log.debug("Error adding service import to account [{a}]: {e}", a=label, e=e)
                incomplete.append(i)
                continue
            I.add_service_import(runtime, account, exporter.account, jacc.service_imports[-1])
    I.reshadow(account)
    return incomplete
