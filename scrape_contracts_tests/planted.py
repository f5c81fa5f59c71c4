"""A module planted in a folder a process starts in, for the tests that check nothing imports from there."""

from __future__ import annotations

from pathlib import Path

# a module someone left in a folder a process starts in: it notes who imported it, then steps aside for the
# real PyYAML, which every Dagster process imports at start
PLANTED_YAML = '''
import os, sys
with open(os.environ["PLANT_MARKER"], "a") as marker:
    marker.write(" ".join(sys.argv[:3]) + "\\n")
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
del sys.modules["yaml"]
import yaml as real
sys.modules["yaml"] = real
'''


def plant_yaml(folder: Path) -> Path:
    """``folder/yaml.py`` as above; the file where its importers are noted."""
    (folder / "yaml.py").write_text(PLANTED_YAML)
    return folder / "planted-yaml-imported-by"
