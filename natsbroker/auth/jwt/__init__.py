"""JWT operator mode, as nats-server's: trusted operators, account JWTs
from a resolver, users that log in with a user JWT.

* :mod:`.claims` - the NATS JWT format (nats-io/jwt v2): decode, verify,
  validate, encode; ``.creds`` files.
* :mod:`.resolver` - where account JWTs come from: ``MEMORY`` (with
  ``resolver_preload``) or the ``full`` directory resolver and its
  ``$SYS.REQ.CLAIMS.*`` requests.
* :mod:`.operator` - trusted keys, accounts made from their JWTs, and the
  login of a user JWT (signature of the nonce, issuer, revocations,
  permissions and limits).
"""
