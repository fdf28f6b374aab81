"""A PostgreSQL client's session with the views: its transaction's state, its prepared statements
and portals, and the statements that are about the session rather than the views.

Drivers and tools send these before and between their queries, and stop at the first refusal:
JDBC sets `extra_float_digits` and `application_name` as it connects, psycopg opens a
transaction before its first query, others ask `SHOW transaction_isolation`. They are answered
as a read-only PostgreSQL answers them:

- BEGIN (START TRANSACTION), COMMIT (END) and ROLLBACK (ABORT) move the session's state, which
  every ReadyForQuery carries; a statement that fails inside a transaction fails it, and
  further queries get 25P02 until ROLLBACK, or ROLLBACK TO a SAVEPOINT (psycopg's nested
  transactions; RELEASE too). A transaction holds no snapshot: each query reads
  the views as they are at that moment (READ COMMITTED, as PostgreSQL's default).
- SET and RESET of the settings in SETTABLE are kept for SHOW. Two change answers:
  `TimeZone` (also from the start-up exchange; `time_zone`), in which timestamps are shown,
  read when a literal names no zone, truncated and cast to dates, as PostgreSQL does
  (`timestamps`; a value PostgreSQL would refuse is refused with 22023), and
  `statement_timeout`, which bounds the session's queries below VIEWS_PG_TIMEOUT_S (never above
  it; 0, its default, leaves that bound alone). `client_encoding` takes UTF8 only, a
  transaction READ WRITE is refused with 25006, and every other setting with 0A000 naming the
  ones that are taken; the others are kept for SHOW and change nothing (the views hold no
  float to format: a double goes out as Python shows it, shortest first).
- SHOW of those settings and of the server's own (`server_version`, `transaction_isolation`...).
"""

import functools
import re
from datetime import tzinfo

from services.views import timestamps
from services.views.cursors import Open
from services.views.portals import Portal, Statement
from services.views.sql import (
    IDENTIFIER,
    Column,
    Result,
    SqlError,
    first_word,
    identifier,
    pg_column,
    uncommented,
)

__all__ = [
    "MAX_PORTALS",
    "MAX_PREPARED_BYTES",
    "SERVER_VERSION",
    "SETTABLE",
    "Session",
    "reported",
    "time_zone_refusal",
]

SERVER_VERSION = "15.0 (ratings views)"  # what psql reads to choose its catalog queries
MAX_PREPARED_BYTES = 4_000_000  # a connection's prepared statements, their text together
# A connection's open portals: a portal suspended part way holds the rest of its rows (at most
# VIEWS_PG_MAX_ROWS) or, first executed with a row limit, its stream's snapshot; one whose rows
# have all gone out holds none.
MAX_PORTALS = 8
# A transaction's words: the command tag, and the state a ReadyForQuery then says.
_TRANSACTION = {
    "BEGIN": ("BEGIN", b"T"),
    "START": ("START TRANSACTION", b"T"),
    "COMMIT": ("COMMIT", b"I"),
    "END": ("COMMIT", b"I"),
    "ROLLBACK": ("ROLLBACK", b"I"),
    "ABORT": ("ROLLBACK", b"I"),
}
# What the start-up exchange reports (ParameterStatus), by PostgreSQL's spelling.
_REPORTED = {
    "server_version": SERVER_VERSION,
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "DateStyle": "ISO, MDY",
    "integer_datetimes": "on",
    "standard_conforming_strings": "on",
    "TimeZone": "UTC",
    "default_transaction_read_only": "on",
}
# Settings a client may SET, and their values before it does.
SETTABLE = {
    "application_name": "",
    "client_encoding": "UTF8",
    "DateStyle": "ISO, MDY",
    "extra_float_digits": "1",
    "search_path": '"$user", public',
    "TimeZone": "UTC",
    "IntervalStyle": "postgres",
    "statement_timeout": "0",
}
_SHOWN = {
    **_REPORTED,
    "transaction_isolation": "read committed",
    "transaction_read_only": "on",
    "max_identifier_length": "63",
    "server_version_num": "150000",
    "session_authorization": "",
}
_SHOWN_WHY = {name: "the server's, as the start-up exchange reports it" for name in _REPORTED}
_SHOWN_WHY |= {
    name: "a client's to SET, kept for SHOW: the views hold no value it changes" for name in SETTABLE
}
_SHOWN_WHY |= {
    "statement_timeout": "bounds the session's queries below VIEWS_PG_TIMEOUT_S (0: that bound alone)",
    "TimeZone": "timestamps are shown, truncated and read (a literal without a zone) in it",
    "transaction_read_only": "the views are read only",
    "transaction_isolation": "each query reads the views as they are",
    "session_authorization": "the user the client named as it connected",
}
_UTF8 = {"utf8", "utf-8", "unicode"}
_SET = re.compile(
    r"\s*SET\s+(?:SESSION\s+|LOCAL\s+)?([A-Za-z_][A-Za-z0-9_.]*)\s*(?:=|\s+TO\s+)\s*(.*?)\s*;?\s*",
    re.IGNORECASE | re.DOTALL,
)
_SET_TIME_ZONE = re.compile(r"\s*SET\s+(?:SESSION\s+|LOCAL\s+)?TIME\s+ZONE\s+(.*?)\s*;?\s*", re.IGNORECASE)
_TRANSACTION_MODE = re.compile(
    r"\s*SET\s+(?:SESSION\s+CHARACTERISTICS\s+AS\s+)?TRANSACTION\s+(.*?)\s*;?\s*", re.IGNORECASE | re.DOTALL
)
_RESET = re.compile(r"\s*RESET\s+([A-Za-z_][A-Za-z0-9_.]*)\s*;?\s*", re.IGNORECASE)
_SHOW = re.compile(r"\s*SHOW\s+(.+?)\s*;?\s*", re.IGNORECASE | re.DOTALL)
_ABORTED = "current transaction is aborted, commands ignored until end of transaction block"
_SAVEPOINT = re.compile(
    r"\s*(SAVEPOINT|RELEASE(?:\s+SAVEPOINT)?|ROLLBACK(?:\s+WORK|\s+TRANSACTION)?\s+TO(?:\s+SAVEPOINT)?)\s+"
    rf"{IDENTIFIER}\s*;?\s*",
    re.IGNORECASE,
)


def reported(zone: str = "UTC") -> dict[str, str]:
    """The server's parameters as the start-up exchange reports them, with the session's
    TimeZone."""
    return _REPORTED | {"TimeZone": zone}


@functools.lru_cache(maxsize=256)
def _zone(value: str) -> tzinfo:
    return timestamps.zone_named(value)


def time_zone_refusal(value: str) -> str | None:
    """Why PostgreSQL would refuse `value` for TimeZone; None when it is one."""
    if len(value) > 63:
        return 'invalid value for parameter "TimeZone": longer than 63 characters'
    try:
        _zone(value)
    except ValueError as err:
        return f'invalid value for parameter "TimeZone": {err}'
    return None


def _canonical(name: str) -> str | None:
    """A setting's name as PostgreSQL spells it, for any case; None for one not known here."""
    lowered = name.lower()
    return next((known for known in (*SETTABLE, *_SHOWN) if known.lower() == lowered), None)


_TIMEOUT = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?)\s*(us|ms|s|min|h|d)?\s*", re.IGNORECASE)
_TIMEOUT_MS = {"us": 0.001, "ms": 1, "": 1, "s": 1000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _milliseconds(value: str) -> int:
    """A duration as PostgreSQL reads statement_timeout: milliseconds, or with a unit."""
    asked = _TIMEOUT.fullmatch(value)
    if asked is None:
        raise SqlError("22023", f'invalid value for parameter "statement_timeout": "{value}" (5000, \'5s\')')
    return round(float(asked.group(1)) * _TIMEOUT_MS[(asked.group(2) or "").lower()])


def _duration_shown(value: str) -> str:
    """statement_timeout as SHOW gives it: 0, or in the largest unit that divides it."""
    ms = _milliseconds(value)
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms" if ms else "0"


def _unquoted(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1].replace(value[0] * 2, value[0])
    return value


class Session:
    """One connection's state: its transaction, settings, prepared statements and portals."""

    def __init__(self, secret: int = 0, zone: str = "UTC", user: str = "") -> None:
        """`secret`: the connection's, as BackendKeyData told it (a CancelRequest names it);
        `zone`: the TimeZone the start-up exchange gave (`time_zone_refusal` checked it);
        `user`: the user it named (current_user; no role is checked: VIEWS_TOKEN is)."""
        self.secret = secret
        self.state = b"I"  # I: idle, T: in a transaction, E: in a failed one
        self.skipping = False  # an extended-protocol error: messages are skipped until Sync
        self.statements: dict[str, Statement] = {}
        self.described: dict[str, tuple[Column, ...]] = {}  # the statements' columns, as told
        self.portals: dict[str, Portal] = {}
        self.settings = dict(SETTABLE)
        self.settings["TimeZone"] = zone
        self.user = user
        self.started_zone = zone  # what RESET goes back to, as PostgreSQL's session default
        self.savepoints: list[str] = []
        self.cursors: dict[str, Open] = {}  # by name, until their transaction ends (or CLOSE)
        self.declared: set[str] = set()  # the cursors declared in the transaction under way

    def time_zone(self) -> tzinfo:
        """The session's TimeZone (`timestamps.ZONE` holds this method for its queries)."""
        return _zone(self.settings["TimeZone"])

    @property
    def statement_timeout_s(self) -> float | None:
        """The session's own bound on a query's time (SET statement_timeout); None: none."""
        ms = _milliseconds(self.settings["statement_timeout"])
        return ms / 1000 if ms else None

    def failed(self) -> None:
        if self.state == b"T":
            self.state = b"E"

    def prepare(self, name: str, statement: Statement) -> None:
        if name and name in self.statements:
            raise SqlError("42P05", f'prepared statement "{name}" already exists')
        held = sum(s.size for n, s in self.statements.items() if n != name) + statement.size
        if held > MAX_PREPARED_BYTES:
            raise SqlError(
                "53000",
                f"this connection's prepared statements are over {MAX_PREPARED_BYTES} bytes: close some",
            )
        self.statements[name] = statement
        self.described.pop(name, None)

    def close_statement(self, name: str) -> None:
        self.statements.pop(name, None)
        self.described.pop(name, None)

    def open(self, name: str, portal: Portal) -> None:
        if name and name in self.portals:
            raise SqlError("42P03", f'portal "{name}" already exists')
        if name not in self.portals and len(self.portals) >= MAX_PORTALS:
            raise SqlError("53000", f"this connection has {MAX_PORTALS} portals open: close some")
        self.close_portal(name)  # the unnamed one, bound again
        self.portals[name] = portal

    def close_portal(self, name: str) -> None:
        """The portal, if open, closed: its stream's snapshot let go."""
        if (portal := self.portals.pop(name, None)) is not None:
            portal.close()

    def close_portals(self) -> None:
        for name in list(self.portals):
            self.close_portal(name)

    def cursor(self, name: str) -> Open:
        if name not in self.cursors:
            raise SqlError("34000", f'cursor "{name}" does not exist')
        return self.cursors[name]

    def close_cursors(self, name: str | None = None) -> None:
        """The named cursor (34000 when there is none), or every one (None)."""
        for closed in [name] if name is not None else list(self.cursors):
            self.cursor(closed).close()
            del self.cursors[closed]
            self.declared.discard(closed)

    def declare(self, name: str, cursor: Open) -> None:
        """A new cursor; the caller has checked the name is free and the count under the cap."""
        self.cursors[name] = cursor
        if self.state != b"I":
            self.declared.add(name)

    def _end_transaction(self, committed: bool) -> None:
        """A cursor WITHOUT HOLD ends with its transaction; one WITH HOLD outlives its COMMIT,
        not the ROLLBACK of the transaction that declared it."""
        for name, cursor in list(self.cursors.items()):
            if not cursor.hold or (not committed and name in self.declared):
                self.close_cursors(name)
        self.declared.clear()

    def refuse_if_aborted(self) -> None:
        if self.state == b"E":
            raise SqlError("25P02", _ABORTED)

    @staticmethod
    def is_command(sql: str) -> bool:
        """Whether `sql` is about the session (no rows of the views): a transaction's word, a
        savepoint's, SET, RESET or SHOW."""
        return first_word(sql) in (*_TRANSACTION, "SAVEPOINT", "RELEASE", "SET", "RESET", "SHOW")

    def command(self, sql: str) -> str | Result:
        """The answer to a statement about the session (`is_command`): its command tag, or
        SHOW's one row; SqlError for a refused one, or for any but the end of a transaction
        that failed."""
        sql = uncommented(sql)
        word = first_word(sql)
        savepoint = _SAVEPOINT.fullmatch(sql)
        if savepoint is not None:
            return self._savepoint(savepoint.group(1).split()[0].upper(), savepoint.group(2))
        if word in ("SAVEPOINT", "RELEASE"):
            raise SqlError("42601", f"syntax error in {word}: {word} name")
        if word in _TRANSACTION:
            self.savepoints.clear()
            tag, state = _TRANSACTION[word]
            if state == b"I":
                self._end_transaction(committed=tag == "COMMIT" and self.state == b"T")
            if self.state == b"E" and state == b"I":
                tag = "ROLLBACK"  # PostgreSQL's answer to COMMIT of a failed transaction
            self.state = state
            return tag
        self.refuse_if_aborted()
        if word == "SHOW":
            return self._show(sql)
        if word == "RESET":
            return self._reset(sql)
        return self._set(sql)

    def _savepoint(self, verb: str, name: str) -> str:
        """SAVEPOINT, RELEASE and ROLLBACK TO inside a transaction (psycopg's nested
        transactions): a savepoint has nothing to keep here, but ROLLBACK TO ends a failure, as
        in PostgreSQL."""
        name = identifier(name)
        if self.state == b"I":
            raise SqlError("25P01", f"{verb} can only be used in transaction blocks")
        if verb == "SAVEPOINT":
            self.refuse_if_aborted()
            self.savepoints.append(name)
            return "SAVEPOINT"
        if name not in self.savepoints:
            raise SqlError("3B001", f'savepoint "{name}" does not exist')
        at = len(self.savepoints) - 1 - self.savepoints[::-1].index(name)
        if verb == "RELEASE":
            self.refuse_if_aborted()
            del self.savepoints[at:]
            return "RELEASE"
        del self.savepoints[at + 1 :]  # ROLLBACK TO: the savepoint stays
        self.state = b"T"
        return "ROLLBACK"

    def _set(self, sql: str) -> str:
        mode = _TRANSACTION_MODE.fullmatch(sql)
        if mode is not None:
            if "READ WRITE" in " ".join(mode.group(1).upper().split()):
                raise SqlError("25006", "the views are read only: a transaction READ WRITE is refused")
            return "SET"
        zone = _SET_TIME_ZONE.fullmatch(sql)
        found = ("TimeZone", zone.group(1)) if zone is not None else None
        if found is None and (setting := _SET.fullmatch(sql)) is not None:
            found = (setting.group(1), setting.group(2))
        if found is None:
            raise SqlError("42601", "syntax error in SET: SET name = value")
        name, value = _canonical(found[0]), _unquoted(found[1])
        if name not in SETTABLE:
            taken = ", ".join(sorted(SETTABLE, key=str.lower))
            raise SqlError(
                "0A000",
                f"SET {found[0]} is not served (these are: {taken})",
            )
        if value.upper() == "DEFAULT":
            value = self.started_zone if name == "TimeZone" else SETTABLE[name]
        if name == "client_encoding" and value.lower() not in _UTF8:
            raise SqlError("22023", f"client_encoding {value!r}: only UTF8 is served")
        if name == "extra_float_digits" and not (value.lstrip("-").isdigit() and -15 <= int(value) <= 3):
            raise SqlError("22023", f"extra_float_digits {value!r}: an integer from -15 to 3")
        if name == "statement_timeout":
            value = _duration_shown(value)
        if name == "TimeZone":
            value = "UTC" if value.upper() == "LOCAL" else value
            if (refusal := time_zone_refusal(value)) is not None:
                raise SqlError("22023", refusal)
        self.settings[name] = "UTF8" if name == "client_encoding" else value[:63]
        return "SET"

    def _reset(self, sql: str) -> str:
        asked = _RESET.fullmatch(sql)
        if asked is None:
            raise SqlError("42601", "syntax error in RESET: RESET name, or RESET ALL")
        if asked.group(1).upper() == "ALL":
            self.settings = dict(SETTABLE) | {"TimeZone": self.started_zone}
            return "RESET"
        name = _canonical(asked.group(1))
        if name not in SETTABLE:
            raise SqlError("0A000", f"RESET {asked.group(1)} is not served")
        self.settings[name] = self.started_zone if name == "TimeZone" else SETTABLE[name]
        return "RESET"

    def setting(self, name: str) -> str | None:
        """A setting's value for current_setting(name), in any case; None for one not known."""
        known = _canonical(name)
        if known == "session_authorization":
            return self.user
        return None if known is None else self.settings.get(known, _SHOWN.get(known, ""))

    def _show(self, sql: str) -> Result:
        asked = _SHOW.fullmatch(sql)
        words = " ".join(asked.group(1).split()).lower() if asked is not None else ""
        aliases = {"transaction isolation level": "transaction_isolation", "time zone": "TimeZone"}
        if words == "all":  # every setting, as PostgreSQL's SHOW ALL lists them
            names = sorted({*SETTABLE, *_SHOWN}, key=str.lower)
            rows = [(n, self.setting(n) or "", _SHOWN_WHY.get(n, "")) for n in names]
            columns = tuple(pg_column(c, "string") for c in ("name", "setting", "description"))
            return Result(columns, list(rows), "SHOW")
        name = _canonical(aliases.get(words, words))
        if name is None:
            raise SqlError("42704", f'unrecognized configuration parameter "{words}"')
        value = self.setting(name) or ""
        return Result((pg_column(name, "string"),), [(value,)], "SHOW")
