"""The I/O writer: a batch in bulk requests of at most ES_SINK_BULK_MAX_BYTES, each answer item
classified by `outcomes`."""

import json
import logging
from functools import partial
from typing import Any, cast

from elasticsearch import ApiError, Elasticsearch, TransportError

from foundation.enriched import RATING_NAMES, EnrichedRating, differs_from
from foundation.errors import ConfigError, FatalSinkError, SinkUnavailable
from services.core.records import Incoming, Rejected
from services.es_sink.config import TEMPLATE_RESOURCE, EsSinkSettings, packaged_template
from services.es_sink.documents import Document, bulk_lines, index_template
from services.es_sink.outcomes import CREDENTIALS, Outcome, outcome, raise_for_request, reason

__all__ = ["BULK_FILTER", "CONFLICT", "EsSink", "byte_bounded", "load_template", "make_client"]

log = logging.getLogger(__name__)

CONFLICT = "version_conflict_engine_exception"  # a `create` of an _id the index holds

# only what classification needs: the answer of a 2,000-item bulk stays small
BULK_FILTER = ["errors", "items.*._index", "items.*.status", "items.*.error"]


def load_template(settings: EsSinkSettings) -> Document:
    """ES_SINK_TEMPLATE_FILE, or the template that comes with the service."""
    path = settings.template_file
    where = path if path is not None else f"the packaged {TEMPLATE_RESOURCE}"
    try:
        template = json.loads(path.read_text() if path is not None else packaged_template())
    except (OSError, ValueError) as err:
        raise ConfigError(f"setting ES_SINK_TEMPLATE_FILE: cannot read {where}: {err}") from None
    if not isinstance(template, dict) or "mappings" not in template.get("template", {}):
        raise ConfigError(f"setting ES_SINK_TEMPLATE_FILE: {where} has no template.mappings")
    return template


def make_client(settings: EsSinkSettings) -> Elasticsearch:
    """Retries off: the consumer loop is the one owner of retries."""
    auth: dict[str, Any] = {}
    if settings.api_key is not None:
        auth["api_key"] = settings.api_key.get_secret_value()
    elif settings.username is not None and settings.password is not None:
        auth["basic_auth"] = (settings.username.get_secret_value(), settings.password.get_secret_value())
    return Elasticsearch(
        settings.url,
        request_timeout=settings.request_timeout_s,
        max_retries=0,
        retry_on_timeout=False,
        **auth,
    )


def byte_bounded(operations: list[bytes], max_bytes: int) -> list[list[bytes]]:
    """The bulk lines (an action and a source per document) in parts of at most `max_bytes`
    (newlines counted); a document larger than that on its own is a part by itself."""
    parts: list[list[bytes]] = []
    part: list[bytes] = []
    size = 0
    for i in range(0, len(operations), 2):
        doc = operations[i : i + 2]
        doc_size = sum(len(line) + 1 for line in doc)
        if part and size + doc_size > max_bytes:
            parts.append(part)
            part, size = [], 0
        part.extend(doc)
        size += doc_size
    if part:
        parts.append(part)
    return parts


class EsSink:
    def __init__(self, settings: EsSinkSettings, client: Elasticsearch, template: Document) -> None:
        self.settings, self.client = settings, client
        families = (
            (settings.ratings_index_prefix, settings.ratings_alias),
            (settings.alerts_index_prefix, settings.alerts_alias),
        )
        self.templates = {alias: index_template(template, prefix, alias) for prefix, alias in families}
        self._templates_installed = not settings.install_template

    def write(self, records: list[Incoming[EnrichedRating]]) -> list[Rejected]:
        # 1. templates first (once), so every new daily index gets the mappings and the alias
        if not self._templates_installed:
            self._call(self._install_templates)
            self._templates_installed = True
        # 2. bulk requests of at most bulk_max_bytes each, _id = rating_id
        prefixed = [(self._prefix(r.topic), r.value) for r in records]
        operations = bulk_lines(prefixed, self.settings.daily_index_days)
        items: list[Any] = []
        errors = False
        for part in byte_bounded(operations, self.settings.bulk_max_bytes):
            answer = self._call(partial(self._bulk, part))
            errors = errors or bool(answer.get("errors"))
            items.extend(answer.get("items", []))
        # 3. each item: ok, reject (dead letter), or the whole batch again / stop
        if not errors:
            return []
        return self._classify(records, items)

    def _bulk(self, lines: list[bytes]) -> Any:
        # the client's type says mappings; it sends pre-serialized NDJSON lines as they are
        return self.client.bulk(operations=cast(Any, lines), filter_path=BULK_FILTER).body

    def close(self) -> None:
        self.client.close()

    def _prefix(self, topic: str) -> str:
        if topic in self.settings.alert_topics:
            return self.settings.alerts_index_prefix
        return self.settings.ratings_index_prefix

    def _install_templates(self) -> None:
        for name, body in self.templates.items():
            self.client.indices.put_index_template(name=name, **body)
            log.info("index template %s installed for %s", name, body["index_patterns"][0])

    def _classify(self, records: list[Incoming[EnrichedRating]], items: list[Any]) -> list[Rejected]:
        rejected: list[Rejected] = []
        retry: list[str] = []
        existing: list[tuple[Incoming[EnrichedRating], str]] = []  # (record, its index): a 409
        for record, item in zip(records, items, strict=True):
            result = next(iter(item.values()))
            if result["status"] == 409 and (result.get("error") or {}).get("type") == CONFLICT:
                existing.append((record, result["_index"]))
                continue
            kind = outcome(int(result["status"]))
            why = reason(result.get("error"))
            if kind is Outcome.FATAL:
                hint = f"; {CREDENTIALS}" if result["status"] in (401, 403) else ""
                raise FatalSinkError(f"elasticsearch refused a document ({result['status']}: {why}){hint}")
            if kind is Outcome.RETRY:
                retry.append(f"{result['status']} {why}")
            elif kind is Outcome.REJECT:
                rejected.append(Rejected(record.message, why))
        if retry:
            raise SinkUnavailable(f"{len(retry)} of {len(records)} documents not indexed, e.g. {retry[0]}")
        return rejected + self._another_rating(existing)

    def _another_rating(self, existing: list[tuple[Incoming[EnrichedRating], str]]) -> list[Rejected]:
        """Of the records whose _id an index holds already, those that are another rating than
        the stored one (two ratings given one id: dead letters, the first stays indexed). The
        others are the same rating again (a replay, a producer's retry): written already."""
        if not existing:
            return []
        docs = [{"_index": index, "_id": str(r.value.rating_id)} for r, index in existing]
        answer = self._call(partial(self.client.mget, docs=docs, source_includes=list(RATING_NAMES)))
        rejected = []
        for (record, index), doc in zip(existing, answer.body["docs"], strict=True):
            if not doc.get("found"):
                raise SinkUnavailable(f"{index}/{record.value.rating_id} answered 409, then was not found")
            differs = differs_from(record.value, doc["_source"])
            if differs is not None:
                rejected.append(
                    Rejected(
                        record.message,
                        f"rating_id {record.value.rating_id} is indexed already in {index} for another "
                        f"rating ({differs}): two ratings share one id; the first stays indexed",
                    )
                )
        if len(rejected) < len(existing):
            log.info(
                "%d document(s) indexed already (a replay): not written again", len(existing) - len(rejected)
            )
        return rejected

    @staticmethod
    def _call(request: Any) -> Any:
        """Run a request; connection errors and HTTP errors through the one table."""
        try:
            return request()
        except ApiError as err:
            raise_for_request(int(err.meta.status), str(err))
        except TransportError as err:  # connection refused or reset, timeout
            raise SinkUnavailable(f"elasticsearch unreachable: {err}") from err
        raise AssertionError("unreachable")
