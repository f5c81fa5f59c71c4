"""The tests' several-host site lives in the package (``scrape_contracts.testing.hosts_site``) since the
multi-host benchmark and the network-namespace harness serve it too; the tests import it from here."""

from scrape_contracts.testing.hosts_site import HostPlan, HostsSite, Seen

__all__ = ["HostPlan", "HostsSite", "Seen"]
