"""`--help` of an entry point, from its settings class: every variable, its default, its meaning."""

from pydantic_settings import BaseSettings

from foundation.logs import HELP as LOG_FORMAT_HELP

__all__ = ["settings_help", "settings_list"]


def settings_help(cls: type[BaseSettings], prog: str, doc: str) -> str:
    return "\n".join([f"usage: {prog} [--help]", "", doc.strip(), "", settings_list(cls)])


def settings_list(cls: type[BaseSettings]) -> str:
    """Every variable of `cls`, its default and its meaning, one a line."""
    prefix = str(cls.model_config.get("env_prefix", ""))
    lines = ["settings (environment variables):"]
    for name, field in cls.model_fields.items():
        default = field.get_default(call_default_factory=True)
        meaning = f"  {field.description}" if field.description else ""
        lines.append(f"  {prefix}{name.upper()}={default!s}{meaning}")
    lines.append(f"  {prefix}ENV_FILE=  a file of NAME=value lines read first (the environment wins)")
    lines.append(f"  {LOG_FORMAT_HELP}")
    return "\n".join(lines)
