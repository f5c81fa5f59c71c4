"""A large contract is parsed once per content; what is kept can never change what a load says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scrape_contracts.contract import yaml_cache
from scrape_contracts.contract.loader import forget_parsed, load_contracts
from scrape_contracts.contract.safe_yaml import YamlLimits


def _large(targets: int = 1500, mistake: str = "") -> str:
    listed = "".join(f"  - url: https://shop.example.com/p/{i}\n    key: p{i}\n    expected: {{sku: S-{i}}}\n"
                     for i in range(targets))
    text = f"name: shop\ntargets:\n{listed}fields:\n  sku: {{selector: '#sku'}}\n{mistake}"
    assert len(text) >= yaml_cache.MIN_BYTES
    return text


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("SCRAPE_CONTRACTS_CACHE_DIR", str(folder))
    forget_parsed()
    yield folder
    forget_parsed()


def _load(folder: Path):
    forget_parsed()  # as a new process would: this one remembers what it parsed
    return load_contracts(folder)


def test_a_large_contract_is_read_back_from_what_was_kept(cache: Path, tmp_path: Path) -> None:
    contracts = tmp_path / "contracts"
    contracts.mkdir()
    (contracts / "shop.yaml").write_text(_large())
    first = _load(contracts)
    kept = list(cache.glob("*.json"))
    assert len(kept) == 1 and not first.errors
    assert kept[0].stat().st_mode & 0o077 == 0 and cache.stat().st_mode & 0o077 == 0  # a copy of the contract
    # the next load takes the kept data, not the text: seen by changing what was kept
    data = json.loads(kept[0].read_text())
    data["data"]["targets"][0]["url"] = "https://shop.example.com/from-the-cache"
    kept[0].write_text(json.dumps(data))
    again = _load(contracts)
    assert again.contracts[0].contract.static_targets[0].url == "https://shop.example.com/from-the-cache"
    assert again.contracts[0].contract.fingerprint == first.contracts[0].contract.fingerprint
    # an edited contract is another text: parsed, and kept beside the first
    (contracts / "shop.yaml").write_text(_large(1501))
    assert len(_load(contracts).contracts[0].contract.static_targets) == 1501
    assert len(list(cache.glob("*.json"))) == 2


def test_a_refused_contract_is_not_kept_and_a_mistake_in_kept_data_is_said_at_its_line(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from scrape_contracts.contract import safe_yaml

    contracts = tmp_path / "contracts"
    contracts.mkdir()
    text = _large(mistake="  price: {selector: '#p', type: money}\n")
    (contracts / "shop.yaml").write_text(text)
    parsed = _load(contracts).errors
    assert parsed and parsed[0].line == text.count("\n")  # the line of `type: money`
    assert not cache.exists() or not list(cache.glob("*.json"))  # refused: not copied anywhere
    # kept by a release that took it (or under other settings): refused now, at the same line
    yaml_cache.keep(text, YamlLimits(), safe_yaml.load(text)[0])
    assert list(cache.glob("*.json"))
    from_cache = _load(contracts).errors
    assert [(str(e), e.line) for e in from_cache] == [(str(e), e.line) for e in parsed]


def test_what_is_not_kept(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    limits = YamlLimits()
    yaml_cache.keep("name: small\n", limits, {"name": "small"})  # parses in a few milliseconds
    text = _large()
    yaml_cache.keep(text, limits, {"when": __import__("datetime").date(2026, 12, 4)})  # JSON has no dates
    yaml_cache.keep(text, limits, {1: "a number key"})
    yaml_cache.keep(text, limits, {"x": float("nan")})
    assert not cache.exists() or not list(cache.glob("*.json"))
    yaml_cache.keep(text, limits, {"name": "shop"})
    assert yaml_cache.read(text, limits) == {"name": "shop"}
    assert yaml_cache.read(text, YamlLimits(max_nodes=10)) is None  # other limits: parsed again
    next(cache.glob("*.json")).write_text("{not json")  # a damaged file is parsed again, not trusted
    assert yaml_cache.read(text, limits) is None
    monkeypatch.setenv("SCRAPE_CONTRACTS_CACHE_DIR", "off")
    yaml_cache.keep(text, limits, {"name": "shop"})
    assert yaml_cache.read(text, limits) is None


def test_a_folder_that_cannot_be_written_changes_nothing(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("SCRAPE_CONTRACTS_CACHE_DIR", str(blocked / "cache"))
    contracts = tmp_path / "contracts"
    contracts.mkdir()
    (contracts / "shop.yaml").write_text(_large())
    result = _load(contracts)
    assert not result.errors and len(result.contracts[0].contract.static_targets) == 1500
    forget_parsed()


def test_only_the_newest_used_are_kept(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yaml_cache, "MAX_FILES", 3)
    limits = YamlLimits()
    texts = [_large(1500 + i) for i in range(5)]
    for text in texts:
        yaml_cache.keep(text, limits, {"name": "shop"})
    assert len(list(cache.glob("*.json"))) == 3
    assert yaml_cache.read(texts[0], limits) is None and yaml_cache.read(texts[4], limits) is not None
