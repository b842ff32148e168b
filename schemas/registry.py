"""A tiny Confluent Schema Registry client: register a subject's schema, fetch a schema by id.

Only what the codec needs, over the stdlib. Credentials may be given in the URL
(``https://user:secret@registry:8081``); they become a Basic auth header and never appear in
messages or logs.
"""

from __future__ import annotations

import base64
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ocrstream.schemas.errors import SchemaRegistryRejectedError, SchemaRegistryUnavailableError

log = logging.getLogger(__name__)

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class SchemaRegistryClient:
    """Registers ``<topic>-value`` subjects and looks schemas up by id, caching both."""

    def __init__(self, url: str, *, timeout_s: float = 10.0) -> None:
        parts = urllib.parse.urlsplit(url)
        self._auth: str | None = None
        if parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            secret = urllib.parse.unquote(parts.password or "")
            self._auth = "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        self.url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self.timeout_s = timeout_s
        self._by_id: dict[int, str] = {}
        self._ids: dict[tuple[str, str], int] = {}

    def register(self, subject: str, schema: str) -> int:
        """The id of ``schema`` under ``subject``, registering it if it's new."""
        key = (subject, schema)
        if key not in self._ids:
            path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions"
            answer = self._call("POST", path, {"schema": schema, "schemaType": "AVRO"})
            if answer is None or not isinstance(answer.get("id"), int):
                raise SchemaRegistryRejectedError(f"registry gave no id for subject {subject}")
            self._ids[key] = answer["id"]
            self._by_id[answer["id"]] = schema
            log.info("registered schema id %d for subject %s", answer["id"], subject)
        return self._ids[key]

    def schema_by_id(self, schema_id: int) -> str | None:
        """The schema text for ``schema_id``, or None if the registry doesn't know it."""
        if schema_id not in self._by_id:
            answer = self._call("GET", f"/schemas/ids/{schema_id}", None)
            if answer is None:
                return None
            text = answer.get("schema")
            if not isinstance(text, str):
                raise SchemaRegistryRejectedError(f"registry has no schema text for id {schema_id}")
            self._by_id[schema_id] = text
        return self._by_id[schema_id]

    def _call(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any] | None:
        """The JSON answer; None on 404. Raises retriable errors for transport problems and 5xx."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Accept", f"{_CONTENT_TYPE}, application/json")
        if data is not None:
            request.add_header("Content-Type", _CONTENT_TYPE)
        if self._auth:
            request.add_header("Authorization", self._auth)
        where = f"{method} {self.url}{path}"
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                answer = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as e:
            detail = e.read()[:500].decode("utf-8", "replace")
            if e.code == 404:
                return None
            if e.code >= 500 or e.code == 429:
                raise SchemaRegistryUnavailableError(f"{where}: HTTP {e.code} {detail}") from e
            raise SchemaRegistryRejectedError(f"{where}: HTTP {e.code} {detail}") from e
        except (urllib.error.URLError, OSError, TimeoutError) as e:
            raise SchemaRegistryUnavailableError(f"{where}: {e}") from e
        except ValueError as e:
            raise SchemaRegistryUnavailableError(f"{where}: answer is not JSON: {e}") from e
        if not isinstance(answer, dict):
            raise SchemaRegistryRejectedError(f"{where}: unexpected answer {answer!r:.200}")
        return answer
