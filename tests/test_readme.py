"""The README stays a front page: at most 12 KB, one example per command, and every link it has resolves."""

from __future__ import annotations

import pathlib
import re

from dbt_delta_optimize.cli.main import COMMAND_MODULES

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: The most the README may weigh; the rest belongs in the docs site (docs/, mkdocs.yml), linked from it.
MAX_BYTES = 12 * 1024


def test_readme_is_at_most_12_kb():
    size = README.stat().st_size
    assert size <= MAX_BYTES, f"README.md is {size:,} bytes (limit {MAX_BYTES:,}): move detail into docs/*.md"


def test_readme_has_one_example_per_command():
    text = README.read_text()
    commands = {c for names in COMMAND_MODULES.values() for c in names} | {"jars"}
    missing = [c for c in sorted(commands) if not re.search(rf"^dbt-delta-optimize {c} ", text, re.M)]
    assert not missing, f"no example of {missing} in README.md"
    for operation in ("optimize", "purge", "vacuum", "analyze", "maintain"):
        assert re.search(rf"^dbt run-operation {operation} ", text, re.M), operation
    assert "make demo" in text and "make test" in text and "dbt_delta_optimize.post_hook()" in text


def test_readme_links_resolve():
    text = README.read_text()
    links = re.findall(r"\]\(([^)]+)\)", text)
    assert links
    for link in links:
        if link.startswith(("http://", "https://")):
            continue
        path, _, anchor = link.partition("#")
        target = README if not path else ROOT / path
        assert target.is_file(), link
        if anchor:
            headings = re.findall(r"^#+ (.+)$", target.read_text(), re.M)
            slugs = {re.sub(r"[^a-z0-9 _-]", "", h.lower()).strip().replace(" ", "-") for h in headings}
            assert anchor in slugs, (link, sorted(slugs))
