"""Every setting of the stack is documented in README.md, and every documented one exists."""

import re
from pathlib import Path

from infra.stack.settings import StackSettings

REPO = Path(__file__).resolve().parents[4]


def test_every_stack_setting_is_documented_and_every_documented_one_exists() -> None:
    readme = (REPO / "README.md").read_text() + (REPO / "docs" / "reference.md").read_text()
    # Digits too: STACK_S3_PORT.
    documented = set(re.findall(r"\bSTACK_[A-Z0-9_]+", readme))
    fields = {f"STACK_{name.upper()}" for name in StackSettings.model_fields}
    assert documented - fields == set(), "README.md names settings the stack does not have"
    assert fields - documented == set(), "settings missing from README.md"
