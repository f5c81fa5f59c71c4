"""Hostile contract files: remote $refs, alias bombs, duplicate keys, oversize files."""

from __future__ import annotations

import http.server
import json
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrape_contracts.contract.loader import load_contract_file
from scrape_contracts.engine.validate import validate_schema


class _CountingServer:
    """A real HTTP server on 127.0.0.1 that serves a JSON Schema and counts the requests it gets."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                outer.requests.append(self.path)
                body = json.dumps({"type": "string", "maxLength": 1}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/schema+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def schema_server() -> Iterator[_CountingServer]:
    server = _CountingServer()
    yield server
    server.close()


def _write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_remote_schema_ref_is_refused_at_load_time_and_never_fetched(tmp_path: Path,
                                                                      schema_server: _CountingServer) -> None:
    path = _write(tmp_path, f"""
        name: shop
        targets: [https://shop.example.com/p/1]
        fields:
          title: {{selector: h1}}
        schema:
          type: object
          properties:
            title: {{$ref: "{schema_server.url}/title.json"}}
            sku: {{$ref: "#/$defs/sku"}}
          $defs:
            sku: {{type: string}}
        """)
    contract, errors = load_contract_file(path)
    assert contract is None
    [error] = errors
    assert error.field == "schema" and error.line == 7
    assert f"{schema_server.url}/title.json" in error.message and "$defs" in error.message
    assert schema_server.requests == []


def test_relative_ref_under_a_remote_id_is_refused(tmp_path: Path, schema_server: _CountingServer) -> None:
    path = _write(tmp_path, f"""
        name: shop
        targets: [https://shop.example.com/p/1]
        fields:
          title: {{selector: h1}}
        schema: {{$id: "{schema_server.url}/root.json", properties: {{title: {{$ref: "title.json"}}}}}}
        """)
    contract, errors = load_contract_file(path)
    assert contract is None and "title.json" in errors[0].message
    assert schema_server.requests == []


def test_local_refs_keep_working(tmp_path: Path) -> None:
    path = _write(tmp_path, """
        name: shop
        targets: [https://shop.example.com/p/1]
        fields:
          sku: {selector: "#sku"}
        schema:
          type: object
          properties: {sku: {$ref: "#/$defs/sku"}}
          $defs: {sku: {type: string, pattern: "^SKU-"}}
        """)
    contract, errors = load_contract_file(path)
    assert errors == [] and contract is not None
    assert validate_schema({"sku": "SKU-1"}, contract.record_schema()) == []
    [violation] = validate_schema({"sku": "X"}, contract.record_schema())
    assert violation.field == "sku" and violation.rule == "schema.pattern"


def test_run_time_validation_never_fetches_a_remote_ref(schema_server: _CountingServer) -> None:
    # a schema built in code skips the loader: the validator itself must not download
    schema = {"type": "object", "properties": {"title": {"$ref": f"{schema_server.url}/title.json"}}}
    violations = validate_schema({"title": "too long"}, schema)
    assert schema_server.requests == []
    assert [v.rule for v in violations] == ["schema.$ref"]
    assert "not fetched" in violations[0].message


def test_every_schema_error_is_reported_at_once(tmp_path: Path) -> None:
    path = _write(tmp_path, """
        name: shop
        targets: [https://shop.example.com/p/1]
        fields:
          title: {selector: h1}
        schema: {type: object, properties: {title: {type: text}, price: {minimum: cheap}}, required: 3}
        """)
    contract, errors = load_contract_file(path)
    assert contract is None
    [error] = errors
    for where in ("properties/price/minimum", "properties/title/type", "at required"):
        assert where in error.message
