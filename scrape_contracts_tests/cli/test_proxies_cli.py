"""`scrape-contracts run` with a contract whose proxy asks for credentials from the environment: whatever
happens (a wrong password, then the right one), the secret is in no line the CLI prints and in no event."""

from __future__ import annotations

import pytest
import yaml

from scrape_contracts_tests.conftest import product_page
from scrape_contracts_tests.defs.provider_setup import ProviderSetup, provider_setup  # noqa: F401
from scrape_contracts_tests.proxy_site import ForwardProxy

pytestmark = pytest.mark.timeout(300)

SECRET = "cl1-pr0xy-s3cret"


def test_the_cli_never_prints_a_proxy_credential(provider_setup: ProviderSetup, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from scrape_contracts.cli import main

    setup = provider_setup
    for key in ("p1", "p2"):
        setup.site.set_page(f"/p/{key}", product_page(f"Book {key}", "BK-1", "$10.00"))
    with ForwardProxy("locked", credentials=("scraper", SECRET)) as proxy:
        contract = {
            "name": "shop", "targets": [{"url": setup.site.url(f"/p/{k}"), "key": k} for k in ("p1", "p2")],
            "fetch": {"adapter": "http", "timeout_s": 5, "retries": 1, "allow_private_addresses": True,
                      "proxies": [{"url": proxy.url, "name": "locked", "username_env": "PX_USER",
                                   "password_env": "PX_PASS"}]},
            "fields": {"title": {"selector": "#title"}, "sku": {"selector": "#sku"},
                       "price": {"selector": "#price", "type": "price"}},
        }
        (setup.contracts_dir / "shop.yaml").write_text(yaml.safe_dump(contract, sort_keys=False))
        monkeypatch.setenv("PX_USER", "scraper")
        outputs = []
        for password, args in ((f"wrong-{SECRET}", []), (f"wrong-{SECRET}", ["--partition", "p1"]),
                               (SECRET, []), (SECRET, ["--partition", "p2"])):
            monkeypatch.setenv("PX_PASS", password)
            code = main(["--contracts-dir", str(setup.contracts_dir), "run", "shop", *args])
            captured = capsys.readouterr()
            outputs.append((code, captured.out + captured.err))
        assert [code for code, _ in outputs][2:] == [0, 0], "\n".join(t for _, t in outputs)
        assert "proxy locked answered 407" in outputs[0][1] + outputs[1][1]
        assert all(SECRET not in text for _, text in outputs)
        assert {c.status for c in proxy.carried()} >= {200, 407}  # (and robots.txt's 404)
        events = "\n".join(repr(e) for run in setup.instance.get_runs() for e in setup.instance.all_logs(run.run_id))
        assert SECRET not in events and "locked" in events

