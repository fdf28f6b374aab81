import stat
from pathlib import Path

from infra.stack.secrets import SECRET_NAMES, ensure_secrets, read_env_file


def test_secrets_are_made_once_private_and_kept(tmp_path: Path) -> None:
    first = ensure_secrets(tmp_path)
    assert set(first) == set(SECRET_NAMES)
    assert all(len(value) >= 24 for value in first.values())
    path = tmp_path / "secrets.env"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ensure_secrets(tmp_path) == first
    assert read_env_file(path) == first


def test_a_missing_secret_is_added_without_touching_the_others(tmp_path: Path) -> None:
    (tmp_path / "secrets.env").write_text("DEBEZIUM_DB_PASSWORD=kept\n")
    values = ensure_secrets(tmp_path)
    assert values["DEBEZIUM_DB_PASSWORD"] == "kept"
    assert values["S3_SECRET_KEY"]
