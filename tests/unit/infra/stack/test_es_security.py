import base64
import hashlib
import os
import re
from pathlib import Path

import pytest
import yaml

from infra.stack import components, es_security, health
from infra.stack.artifacts import Installed
from infra.stack.errors import StackError
from infra.stack.settings import StackSettings

SECRETS = {es_security.ADMIN_SECRET: "admin-secret-value", es_security.SINK_SECRET: "sink-secret-value"}


def _verifies(password: str, stored: str) -> bool:
    """Elasticsearch's check of a {PBKDF2} hash: it reads the key and the salt as the last two
    44-character tokens and the cost between the prefix and them, then hashes again."""
    key, salt = stored[-44:], stored[-89:-45]
    assert stored[-45] == "$" and stored[-90] == "$", stored
    cost = int(stored[len("{PBKDF2}") : -90])
    again = hashlib.pbkdf2_hmac("sha512", password.encode(), base64.b64decode(salt), cost, 32)
    return base64.b64encode(again).decode() == key


def test_a_password_hash_has_the_layout_elasticsearch_reads_and_a_fresh_salt_each_time() -> None:
    first, second = es_security.pbkdf2_hash("s3cret"), es_security.pbkdf2_hash("s3cret")
    assert first.startswith("{PBKDF2}10000$") and first != second
    assert _verifies("s3cret", first) and _verifies("s3cret", second)
    assert not _verifies("s3cret!", first)
    # A known vector: PBKDF2-HMAC-SHA512 with this salt and cost.
    salt = bytes(range(32))
    known = hashlib.pbkdf2_hmac("sha512", b"pw", salt, 1000, 32)
    assert es_security.pbkdf2_hash("pw", salt, 1000) == (
        f"{{PBKDF2}}1000${base64.b64encode(salt).decode()}${base64.b64encode(known).decode()}"
    )


def test_the_sink_s_role_creates_documents_and_indices_of_its_families_and_nothing_else() -> None:
    roles = yaml.safe_load(es_security.ROLES_FILE.read_text())
    assert roles == {
        es_security.SINK_ROLE: {
            "cluster": ["manage_index_templates"],
            "indices": [
                {
                    "names": ["ratings-*", "unhappy-platinum-*"],
                    "privileges": ["create_doc", "auto_configure", "read"],
                }
            ],
        }
    }


def _node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, security: str) -> components.Component:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    settings = StackSettings(state_dir=tmp_path, kafka_security=security)
    home = settings.service_state_dir / "elasticsearch" / "home"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "elasticsearch").write_text("")  # unpacked already
    (home / "config").mkdir()
    (home / "config" / "users").write_text("")  # the distribution's empty files
    installed = Installed(Path("/jdk"), Path("k"), Path("s"), Path("j"), Path("p"), Path("e.zip"))
    return components.elasticsearch(settings, installed, SECRETS)


def test_the_secured_node_has_security_on_and_its_users_hashed_in_files_only_it_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = _node(tmp_path, monkeypatch, "scram")
    command = " ".join(node.command)
    assert "xpack.security.enabled=true" in command
    conf = Path(node.environment["ES_PATH_CONF"])
    users = dict(line.split(":", 1) for line in (conf / "users").read_text().splitlines())
    assert set(users) == {"stack_admin", "es_sink"}
    assert _verifies("admin-secret-value", users["stack_admin"])
    assert _verifies("sink-secret-value", users["es_sink"])
    assert (conf / "users_roles").read_text().splitlines() == [
        "superuser:stack_admin",
        "ratings_es_sink:es_sink",
    ]
    assert (conf / "roles.yml").read_text() == es_security.ROLES_FILE.read_text()
    for name in ("users", "users_roles", "roles.yml"):
        assert (conf / name).stat().st_mode & 0o777 == 0o600, name
    for secret in SECRETS.values():  # only hashes, nowhere a password
        assert secret not in command and secret not in " ".join(node.environment.values())
        assert not any(secret in path.read_text() for path in conf.rglob("*") if path.is_file())
    assert (
        "queryable_built_in_roles_enabled=false" in (conf / "jvm.options.d" / "security.options").read_text()
    )


def test_the_plaintext_node_has_no_users_and_security_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = _node(tmp_path, monkeypatch, "plaintext")
    assert "xpack.security" not in " ".join(node.command)  # elasticsearch.yml's false holds
    conf = Path(node.environment["ES_PATH_CONF"])
    assert (conf / "users").read_text() == "" and not (conf / "jvm.options.d" / "security.options").exists()


def test_a_state_folder_secured_before_elasticsearch_was_gets_a_message_not_a_key_error(
    tmp_path: Path,
) -> None:
    settings = StackSettings(state_dir=tmp_path, kafka_security="scram")
    with pytest.raises(
        StackError, match=re.escape("secrets.env has no ELASTICSEARCH_ADMIN_PASSWORD: `make up` creates it")
    ):
        health.check_elasticsearch(settings, {"S3_ACCESS_KEY": "a"})
    assert es_security.admin_auth(SECRETS) == (es_security.ADMIN_USER, "admin-secret-value")
