"""python -m infra.stack {install,up,down,status,clean,env}"""

import argparse
import logging
import sys

from foundation.errors import ConfigError
from foundation.help import settings_list
from foundation.settings import load_settings
from infra.stack import stack
from infra.stack.artifacts import install
from infra.stack.errors import StackError
from infra.stack.secrets import read_env_file
from infra.stack.settings import StackSettings
from infra.stack.versions import load_versions

SECRET_MARKERS = ("PASSWORD", "SECRET", "ACCESS_KEY")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m infra.stack",
        description=__doc__,
        epilog=settings_list(StackSettings),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "command",
        choices=["install", "up", "down", "status", "clean", "env"],
        help="install: fetch artifacts only; env: print how clients reach the stack (secrets masked)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s stack: %(message)s", datefmt="%H:%M:%S")
    try:
        settings = load_settings(StackSettings)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        if args.command == "install":
            install(settings, load_versions())
        elif args.command == "up":
            with stack.exclusive(settings):
                stack.up(settings)
            stack.status(settings)
        elif args.command == "down":
            with stack.exclusive(settings):
                stack.down(settings)
        elif args.command == "clean":
            with stack.exclusive(settings):
                stack.clean(settings)
        elif args.command == "status":
            return 0 if stack.status(settings) else 1
        elif args.command == "env":
            for name, value in read_env_file(stack.stack_env_path(settings)).items():
                shown = "****" if any(m in name for m in SECRET_MARKERS) else value
                print(f"{name}={shown}")
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if exc.hint:
            print(f"what to do: {exc.hint}", file=sys.stderr)
        return 1
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
