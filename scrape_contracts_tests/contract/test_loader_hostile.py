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


def _bomb(name: str, levels: int = 9, width: int = 9) -> str:
    """A flow list of ``levels`` lists, each ``width`` aliases of the one before: width**levels leaves in a
    few hundred bytes (the last list is the bomb; the others only define its anchors)."""
    lists = [f"&{name}0 [{', '.join(['lol'] * width)}]"]
    lists += [f"&{name}{i} [{', '.join([f'*{name}{i - 1}'] * width)}]" for i in range(1, levels)]
    return "[" + ", ".join(lists) + "]"


@pytest.mark.timeout(60)
def test_alias_bomb_in_schema_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("name: shop\ntargets: [https://shop.example.com/p/1]\nfields:\n  title: {selector: h1}\n"
                    f"schema:\n  type: object\n  properties:\n    title:\n      const: {_bomb('l')}\n")
    assert path.stat().st_size < 1000
    contract, errors = load_contract_file(path)
    assert contract is None
    [error] = errors
    assert "aliases" in error.message and "SCRAPE_CONTRACTS_YAML_MAX_NODES" in error.message
    assert error.line == 9


@pytest.mark.timeout(60)
def test_alias_bomb_in_expected_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("name: shop\ntargets: [https://shop.example.com/p/1]\n"
                    f"fields:\n  title: {{selector: h1, rules: {{expected: {_bomb('e', levels=8)}}}}}\n")
    assert path.stat().st_size < 700
    contract, errors = load_contract_file(path)
    assert contract is None and "expands to more than" in errors[0].message and errors[0].line == 4


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, """
        name: shop
        targets: [https://shop.example.com/p/1]
        fields:
          title: {selector: h1, rules: {expected: &loop [1, *loop]}}
        """)
    contract, errors = load_contract_file(path)
    assert contract is None and "contains it" in errors[0].message and errors[0].line == 5


def test_small_aliases_and_merge_keys_still_load(tmp_path: Path) -> None:
    path = _write(tmp_path, """
        name: shop
        targets: [https://shop.example.com/p/1?a=1&b=2]
        fields:
          price: &money {selector: "#price", type: price, rules: {min: 0}}
          old_price: {<<: *money, selector: "#old"}
        """)
    contract, errors = load_contract_file(path)
    assert errors == [] and contract is not None
    assert contract.fields["old_price"].selector == "#old" and contract.fields["old_price"].type == "price"


def test_duplicate_keys_are_errors_at_the_repeat(tmp_path: Path) -> None:
    path = _write(tmp_path, """
        name: shop
        targets: [http://127.0.0.1/p/1]
        fetch:
          allow_private_addresses: false
          timeout_s: 5
          allow_private_addresses: true
        fields:
          title: {selector: h1}
        """)
    contract, errors = load_contract_file(path)
    assert contract is None
    [error] = errors
    assert error.line == 7 and "duplicate key 'allow_private_addresses' (first at line 5)" in error.message


def test_duplicate_top_level_key(tmp_path: Path) -> None:
    path = _write(tmp_path, """
        name: shop
        targets: [https://shop.example.com/p/1]
        fields: {title: {selector: h1}}
        name: other
        """)
    contract, errors = load_contract_file(path)
    assert contract is None and errors[0].line == 5 and "duplicate key 'name'" in errors[0].message


def test_oversize_contract_file_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRAPE_CONTRACTS_YAML_MAX_BYTES", "200")
    path = _write(tmp_path, "name: shop\ntargets: [https://shop.example.com/p/1]\n"
                  "fields: {title: {selector: h1}}\n" + "#" * 300 + "\n")
    contract, errors = load_contract_file(path)
    assert contract is None and "SCRAPE_CONTRACTS_YAML_MAX_BYTES" in errors[0].message


def test_node_limit_is_a_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.yaml"
    bomb = _bomb("s", levels=3, width=4)
    path.write_text("name: shop\ntargets: [https://shop.example.com/p/1]\n"
                    f"fields:\n  title: {{selector: h1, rules: {{expected: {bomb}}}}}\n")
    monkeypatch.setenv("SCRAPE_CONTRACTS_YAML_MAX_NODES", "50")
    assert "expands to more than 50 nodes" in load_contract_file(path)[1][0].message
    monkeypatch.setenv("SCRAPE_CONTRACTS_YAML_MAX_NODES", "1000")
    contract, errors = load_contract_file(path)
    assert errors == [] and contract is not None


def test_whole_contract_checks_report_with_field_errors_and_all_at_once(tmp_path: Path) -> None:
    path = _write(tmp_path, """
        name: shop
        targets:
          - {url: "https://shop.example.com/p/1", key: p1, expected: {sku: A-1}}
          - {url: "https://shop.example.com/p/2", key: p1}
        fields:
          title: {selector: "div[["}
        """)
    contract, errors = load_contract_file(path)
    assert contract is None
    by_field = {e.field: e for e in errors}
    assert "invalid CSS selector" in by_field["fields.title.selector"].message
    assert by_field["targets[0].expected"].message.endswith("expects unknown field(s) sku")
    assert by_field["targets[0].expected"].line == 4
    assert "share partition key 'p1'" in by_field["targets[1]"].message and by_field["targets[1]"].line == 5
