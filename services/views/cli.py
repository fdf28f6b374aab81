"""python -m services.views.cli: print a view from the query service, or follow its changes.

list                       every view: rows, key, freshness
show NAME [KEY]            one row (KEY: the key parts joined by "/"), or the first rows
follow NAME [--key KEY]    the current rows, then each change as it happens (Ctrl-C stops)
"""

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from http.client import HTTPConnection
from typing import Any


def _get(url: str, path: str) -> Any:
    try:
        with urllib.request.urlopen(url + path, timeout=10) as answer:  # noqa: S310 (the service's URL)
            return json.loads(answer.read())
    except urllib.error.HTTPError as err:
        raise SystemExit(f"error: {json.loads(err.read()).get('error', err.reason)}") from None
    except OSError as err:
        raise SystemExit(f"error: the views query service at {url} does not answer: {err}") from None


def _follow(url: str, name: str, key: str | None) -> None:
    parts = urllib.parse.urlsplit(url)
    conn = HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=60)
    query = f"?key={urllib.parse.quote(key)}" if key else ""
    conn.request("GET", f"/views/{urllib.parse.quote(name)}/changes{query}")
    response = conn.getresponse()
    if response.status != 200:
        raise SystemExit(f"error: {json.loads(response.read()).get('error')}")
    event = ""
    while line := response.readline():
        text = line.decode().rstrip("\n")
        if text.startswith("event:"):
            event = text[6:].strip()
        elif text.startswith("data:") and event in ("snapshot", "change"):
            print(f"{event:8} {json.dumps(json.loads(text[5:])['row'])}", flush=True)
        elif text.startswith("data:") and event == "live":
            print("-- live: changes from here on --", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.views.cli",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--url", default="http://127.0.0.1:8087", help="the query service (default %(default)s)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list")
    show = sub.add_parser("show")
    show.add_argument("name")
    show.add_argument("key", nargs="?")
    follow = sub.add_parser("follow")
    follow.add_argument("name")
    follow.add_argument("--key")
    args = parser.parse_args(argv)
    url = args.url.rstrip("/")
    if args.command == "list":
        for view in _get(url, "/views")["views"]:
            print(json.dumps(view))
    elif args.command == "show" and args.key:
        key = "/".join(urllib.parse.quote(p, safe="") for p in args.key.split("/"))
        print(json.dumps(_get(url, f"/views/{urllib.parse.quote(args.name)}/{key}"), indent=1))
    elif args.command == "show":
        for row in _get(url, f"/views/{urllib.parse.quote(args.name)}?limit=20")["rows"]:
            print(json.dumps(row))
    else:
        try:
            _follow(url, args.name, args.key)
        except KeyboardInterrupt:
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
