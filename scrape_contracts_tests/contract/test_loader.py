from __future__ import annotations

import textwrap
from pathlib import Path

from scrape_contracts.cli import main
from scrape_contracts.contract.loader import load_contracts
from scrape_contracts.contract.targets import PARTITION_KEY_RE, partition_key_for_url

GOOD = """
name: {name}
targets: [https://shop.example.com/p/1]
fields:
  title: {{selector: h1}}
"""

TEN_MISTAKES = """
name: Bad-Name
descriptoin: typo in a key
targets:
  - ftp://files.example.com/x
fetch:
  timeout_s: -1
fields:
  price:
    selector: "div[["
    type: money
    pattern: "(unclosed"
    rules: {min: 10, max: 1}
  title:
    selector: "//h1["
schema: {type: 12}
schedule: {cron: "61 * * * *"}
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def test_broken_contract_beside_good_ones(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", GOOD.format(name="alpha"))
    write(tmp_path, "b.yaml", GOOD.format(name="beta"))
    broken = write(tmp_path, "broken.yaml", GOOD.format(name="gamma").replace("selector: h1", "selector: 'h1[['"))
    result = load_contracts(tmp_path)
    assert sorted(result.by_name()) == ["alpha", "beta"]
    assert len(result.errors) == 1
    error = result.errors[0]
    assert error.file == str(broken)
    assert error.field == "fields.title.selector"
    assert error.line == 5
    assert "invalid CSS selector" in error.message


def test_ten_mistakes_give_ten_clear_messages(tmp_path: Path, capsys) -> None:
    write(tmp_path, "bad.yaml", TEN_MISTAKES)
    exit_code = main(["--contracts-dir", str(tmp_path), "validate"])
    out = capsys.readouterr().out
    errors = [line for line in out.splitlines() if line.startswith("error")]
    assert exit_code == 1
    fields = [line.split(": ")[1] for line in errors]
    assert sorted(fields) == sorted([
        "name", "descriptoin", "targets[0].url", "fetch.timeout_s", "fields.price.selector", "fields.price.type",
        "fields.price.pattern", "fields.price.rules", "fields.title.selector", "schema", "schedule.cron",
    ])
    assert len(errors) >= 10
    assert all("bad.yaml:" in line for line in errors)  # every message names the file and line
    assert "unknown field" in out and "invalid XPath" in out and "invalid cron" in out


def test_duplicate_names_unreadable_yaml_and_empty_dir(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", GOOD.format(name="same"))
    write(tmp_path, "b.yaml", GOOD.format(name="same"))
    write(tmp_path, "c.yaml", "name: [unclosed\n")
    result = load_contracts(tmp_path)
    messages = [str(e) for e in result.errors]
    assert [c.contract.name for c in result.contracts] == ["same"]
    assert any("duplicate contract name 'same'" in m and "b.yaml" in m for m in messages)
    assert any("c.yaml:" in m and "invalid YAML" in m for m in messages)
    assert load_contracts(tmp_path / "missing").errors[0].message.startswith("contracts directory does not exist")


def test_validate_succeeds_on_the_shipped_examples(capsys) -> None:
    assert main(["validate"]) == 0
    assert "0 error(s)" in capsys.readouterr().out


def test_partition_keys_are_valid_stable_and_unique() -> None:
    urls = [
        "https://shop.example.com/p/1", "https://shop.example.com/p/1?color=red,blue&size=[xl]",
        "https://shop.example.com/" + "a" * 500, "https://ÜNICODE.example.com/straße/…", "http://x.example/",
    ]
    keys = [partition_key_for_url(u) for u in urls]
    assert all(PARTITION_KEY_RE.match(k) for k in keys), keys
    assert len(set(keys)) == len(keys)
    assert keys == [partition_key_for_url(u) for u in urls]  # stable
    assert keys[0].startswith("shop.example.com_p_1-")
    assert all(len(k) <= 71 for k in keys)


def test_derived_schema_and_expected_values(tmp_path: Path) -> None:
    write(tmp_path, "c.yaml", """
        name: shop
        targets:
          - {url: "https://shop.example.com/p/1", key: p1, expected: {sku: A-1}}
        fields:
          sku: {selector: "#sku"}
          price: {selector: "#price", type: price, required: false}
    """)
    contract = load_contracts(tmp_path).contracts[0].contract
    schema = contract.record_schema()
    assert schema["required"] == ["sku"]
    assert schema["properties"]["price"]["type"] == ["number", "null"]
    assert contract.expected_for("p1") == {"sku": "A-1"}


ITEMS = """
name: listing
targets: [https://blog.example/]
fields:
  latest: {selector: "ul.posts li:first-child a", item: first}
  gbp: {selector: "table.rates tr:nth-of-type(3) td", type: number, item: {pick: key, key: GBP}}
  newest: {selector: "ul.posts li a", item: {pick: newest}}
"""


def test_item_rules_load_and_their_mistakes_are_named(tmp_path: Path) -> None:
    write(tmp_path, "good.yaml", ITEMS)
    (contract,) = [c.contract for c in load_contracts(tmp_path).contracts]
    assert contract.fields["latest"].item.pick == "first"
    assert (contract.fields["gbp"].item.pick, contract.fields["gbp"].item.key) == ("key", "GBP")
    bad = ITEMS.replace("item: first", "item: oldest").replace("{pick: key, key: GBP}", "{pick: key}")
    write(tmp_path, "good.yaml", bad.replace("{pick: newest}", "{pick: newest, key: x}"))
    errors = {e.field: e.message for e in load_contracts(tmp_path).errors}
    assert set(errors) == {"fields.latest.item.pick", "fields.gbp.item", "fields.newest.item"}
    assert "'first', 'last', 'newest' or 'key'" in errors["fields.latest.item.pick"]
    assert "pick: key needs the key" in errors["fields.gbp.item"]
    assert "only with pick: key" in errors["fields.newest.item"]


def test_a_contract_with_only_some_targets_keeps_what_decides_their_outcome(tmp_path: Path) -> None:
    # what a batched run sends its worker processes: its own targets, not the contract's thousands
    import pickle

    targets = "".join(f"  - url: https://shop.example.com/p/{i}\n    key: p{i}\n"
                      f"    expected: {{sku: S-{i}}}\n" for i in range(300))
    write(tmp_path, "shop.yaml", "name: shop\ntargets:\n" + targets
          + "fields:\n  sku: {selector: '#sku'}\n  title: {selector: h1, rules: {expected: Book}}\n")
    contract = load_contracts(tmp_path).by_name()["shop"].contract
    fingerprint, everything = contract.fingerprint, contract.expected_for("p7")  # cached on the whole one
    some = contract.with_only(["p7", "p8", "missing"])
    assert [t.partition_key for t in some.static_targets] == ["p7", "p8"]
    assert some.fingerprint == fingerprint  # its unchanged pages stay unchanged
    assert some.expected_for("p7") == everything == {"sku": "S-7", "title": "Book"}
    assert some.expected_for("p9") == {"title": "Book"}  # not its target: only the field's rule
    assert contract.expected_for("p9") == {"sku": "S-9", "title": "Book"}  # the whole one is as it was
    assert len(pickle.dumps(some)) * 20 < len(pickle.dumps(contract))
    assert pickle.loads(pickle.dumps(some)) == some


def test_a_dynamic_contract_with_only_some_targets_is_itself(tmp_path: Path) -> None:
    write(tmp_path, "shop.yaml", "name: shop\ntargets: {dynamic: true}\nfields:\n  title: {selector: h1}\n")
    contract = load_contracts(tmp_path).by_name()["shop"].contract
    assert contract.with_only(["p1"]) is contract
