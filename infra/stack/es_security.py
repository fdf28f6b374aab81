"""Elasticsearch's security in the secured mode (STACK_KAFKA_SECURITY=scram): basic
authentication on every request, and two users of the file realm, each with only what it needs.

- `stack_admin` (the `superuser` role): the stack's own tooling and its tests, and the operator.
- `es_sink` (`ratings_es_sink`, in infra/elasticsearch/roles.yml): installs its index templates,
  creates the daily indices of its two families, creates documents (never overwrites or deletes
  one) and reads them back by id; nothing else.

The distribution the stack runs (the integ-test-zip) carries Elasticsearch's security module but
not the analysis module that its `.security` index needs, so users and roles live in the file
realm (files in the node's config folder, rendered at each start) rather than behind the
security API. Passwords are made once per state folder (`secrets.env`, 0600); the users file
holds only their PBKDF2 hashes.
"""

import base64
import hashlib
import os
from pathlib import Path

from infra.stack.errors import StackError
from infra.stack.settings import INFRA_DIR

ADMIN_USER = "stack_admin"
SINK_USER = "es_sink"
SINK_ROLE = "ratings_es_sink"
ADMIN_SECRET = "ELASTICSEARCH_ADMIN_PASSWORD"  # noqa: S105 - a name, not a value
SINK_SECRET = "ES_SINK_PASSWORD"  # noqa: S105 - a name, not a value
SECRET_NAMES = (ADMIN_SECRET, SINK_SECRET)
ROLES_FILE = INFRA_DIR / "elasticsearch" / "roles.yml"
# Elasticsearch's PBKDF2 hasher: HMAC-SHA512, a 32-byte salt and key, this many iterations
# unless the hash says otherwise (its default).
PBKDF2_ITERATIONS = 10_000
# The settings the secured node starts with (-E), over infra/elasticsearch/elasticsearch.yml.
NODE_SETTINGS = {
    "xpack.security.enabled": "true",
    # Listening on loopback only, as the rest of the secured stack (SASL without TLS).
    "xpack.security.http.ssl.enabled": "false",
    "xpack.security.transport.ssl.enabled": "false",
}
# Without this, the node tries to build its `.security` index at start, and logs that the
# distribution lacks an analysis filter it needs.
JVM_OPTIONS = "-Des.queryable_built_in_roles_enabled=false\n"


def pbkdf2_hash(password: str, salt: bytes | None = None, iterations: int = PBKDF2_ITERATIONS) -> str:
    """A password hash in the form Elasticsearch's file realm reads: {PBKDF2}cost$salt$key."""
    salt = os.urandom(32) if salt is None else salt
    key = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations, 32)
    return f"{{PBKDF2}}{iterations}${base64.b64encode(salt).decode()}${base64.b64encode(key).decode()}"


def render(conf: Path, secrets: dict[str, str]) -> None:
    """The file realm's users, their roles and the role definitions, in the node's config folder."""
    users = {ADMIN_USER: secrets[ADMIN_SECRET], SINK_USER: secrets[SINK_SECRET]}
    _private(conf / "users", "".join(f"{name}:{pbkdf2_hash(pw)}\n" for name, pw in users.items()))
    _private(conf / "users_roles", f"superuser:{ADMIN_USER}\n{SINK_ROLE}:{SINK_USER}\n")
    _private(conf / "roles.yml", ROLES_FILE.read_text())
    (conf / "jvm.options.d" / "security.options").write_text(JVM_OPTIONS)


def node_arguments() -> list[str]:
    return [arg for name, value in NODE_SETTINGS.items() for arg in ("-E", f"{name}={value}")]


def admin_auth(secrets: dict[str, str]) -> tuple[str, str]:
    """The stack's own Elasticsearch user; a state folder secured before Elasticsearch was has no
    password for it until its next `make up` makes one."""
    if not secrets.get(ADMIN_SECRET):
        raise StackError(
            f"secrets.env has no {ADMIN_SECRET}: `make up` creates it and signs the node's users in"
        )
    return ADMIN_USER, secrets[ADMIN_SECRET]


def _private(path: Path, text: str) -> None:
    path.unlink(missing_ok=True)
    path.touch(mode=0o600)
    path.write_text(text)
