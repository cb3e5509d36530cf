"""Which operator keys account JWTs may be signed with, and whether an
account JWT checks out against them (nats-server's verifyAccountClaims).

Used by the configuration's operator checks at start and by operator mode at
run time; only the JWT format below it.
"""

from natsbroker.auth.jwt import claims as C

# nats-server's words for an account JWT that does not check out.
ACCOUNT_VALIDATION = "account validation failed"


def trusted_keys(config, operators=None):
    """The operator keys account JWTs may be signed with."""
    if operators is None:
        operators = [C.decode_operator(j) for j in config.operators]
    keys = list(config.trusted_keys)
    for op in operators:
        if not op.strict_signing_key_usage:
            keys.append(op.subject)
        keys.extend(op.signing_keys)
    return keys


def verify_account(token, name, trusted, now=None):
    """The AccountClaims of ``token`` if it is a valid account JWT for
    ``name`` issued by a ``trusted`` key (nats-server's verifyAccountClaims),
    else None."""
    try:
        claims = C.decode_account(token)
    except C.JWTError:
        return None
    if claims.issuer not in trusted:
        return None
    vr = C.ValidationResults()
    claims.validate(vr, now)
    if vr.is_blocking(True) or claims.subject != name:
        return None
    return claims
