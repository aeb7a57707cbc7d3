"""docs/migrating.md's idiom tables are made from the catalogues: a claim of "identical" there is a passing test."""

from __future__ import annotations

from tests.compat import catalogue


def test_the_migrating_page_shows_the_catalogues_as_they_are():
    page = catalogue.MIGRATING.read_text()
    assert catalogue.rendered(page, catalogue.catalogues()) == page, (
        "docs/migrating.md's catalogue tables are stale: run `python -m tests.compat.catalogue`")


def test_every_catalogue_with_idioms_has_its_table_on_the_page():
    page = catalogue.MIGRATING.read_text()
    for peer, found in catalogue.catalogues().items():
        if found.idioms:
            start, end = catalogue._markers(peer)
            assert start in page and end in page, f"docs/migrating.md has no table for {peer}'s catalogue"
