"""What every program's settings stand on: a frozen class that refuses unknown variables, read
once at start from the environment or from the file named by <PREFIX>ENV_FILE (lines
NAME=value, the same names), with a bad value reported by the variable to fix."""

import os
import re
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from foundation.errors import ConfigError

__all__ = ["Settings", "load_settings", "problems"]


class Settings(BaseSettings):
    """Base of every program's settings; a subclass adds its `env_prefix` and its fields."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid")


S = TypeVar("S", bound=BaseSettings)


def load_settings(cls: type[S], **overrides: Any) -> S:
    """Settings from the environment (or <PREFIX>ENV_FILE), `overrides` (command-line flags)
    winning; a bad one raises ConfigError naming its variable. Connects nowhere."""
    prefix = str(cls.model_config.get("env_prefix", ""))
    env_file = os.environ.get(f"{prefix}ENV_FILE")
    if env_file and not Path(env_file).is_file():
        raise ConfigError(f"setting {prefix}ENV_FILE: no such file: {env_file}")
    try:
        return cls(_env_file=env_file, **overrides)
    except (ValidationError, SettingsError) as err:
        raise ConfigError("; ".join(problems(prefix, err))) from None


def problems(prefix: str, err: ValidationError | SettingsError) -> list[str]:
    """One line per bad setting, each naming its variable."""
    if isinstance(err, SettingsError):  # a value that is not JSON where JSON is expected
        field = re.search(r'field "(\w+)"', str(err))
        name = f"{prefix}{field.group(1).upper()}" if field else f"{prefix}*"
        return [f"setting {name}: not valid JSON ({err})"]
    found = []
    for problem in err.errors():
        if not problem["loc"]:  # a rule across settings: its message names them
            found.append(f"settings: {problem['msg']}")
            continue
        name = "_".join(str(p) for p in problem["loc"]).upper()
        name = name if name.startswith(prefix) else f"{prefix}{name}"
        found.append(f"setting {name}: {problem['msg']}")
    return found
