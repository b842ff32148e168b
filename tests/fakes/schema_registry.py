"""An in-process fake of the two Confluent Schema Registry endpoints the codec uses.

Only for testing the Confluent framing of ``ocrstream.schemas``: there is no registry in the
local services. ``POST /subjects/{subject}/versions`` gives one global id per distinct schema
text; ``GET /schemas/ids/{id}`` returns it or 404. ``fail_with`` makes every call answer that
HTTP status, to test the error paths.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeSchemaRegistry:
    def __init__(self) -> None:
        self.schemas: dict[int, str] = {}
        self.subjects: dict[str, list[int]] = {}
        self.requests: list[tuple[str, str, str | None]] = []
        self.fail_with: int | None = None
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeSchemaRegistry:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _register(self, subject: str, schema: str) -> int:
        known = {text: schema_id for schema_id, text in self.schemas.items()}
        schema_id = known.get(schema) or len(self.schemas) + 1
        self.schemas[schema_id] = schema
        versions = self.subjects.setdefault(subject, [])
        if schema_id not in versions:
            versions.append(schema_id)
        return schema_id

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                fake.requests.append(("GET", self.path, self.headers.get("Authorization")))
                if fake.fail_with:
                    return self._answer(fake.fail_with, {"error_code": fake.fail_with})
                parts = self.path.strip("/").split("/")
                if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
                    text = fake.schemas.get(int(parts[2]))
                    if text is not None:
                        return self._answer(200, {"schema": text})
                return self._answer(404, {"error_code": 40403, "message": "Schema not found"})

            def do_POST(self) -> None:
                fake.requests.append(("POST", self.path, self.headers.get("Authorization")))
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if fake.fail_with:
                    return self._answer(fake.fail_with, {"error_code": fake.fail_with})
                parts = self.path.strip("/").split("/")
                if len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
                    return self._answer(200, {"id": fake._register(parts[1], body["schema"])})
                return self._answer(404, {"error_code": 404, "message": "not found"})

        return Handler
