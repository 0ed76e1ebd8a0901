"""docs/results.md is what its raw files give (benchmarks/results_page.py), and every row names a
command and a committed raw file."""
import re

from benchmarks import results_page


def test_page_agrees_with_the_raw_files():
    assert results_page.PAGE.read_text() == results_page.render(), \
        "docs/results.md differs from its raw files: run python -m benchmarks.results_page"


def test_every_row_has_a_command_a_date_and_an_existing_raw_file():
    rows = [r for _, make in results_page.SECTIONS for r in make()]
    assert len(rows) >= 10
    for r in rows:
        assert (results_page.ROOT / r.raw).is_file(), r.raw
        assert r.command.startswith("`python"), r
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", r.date), r
        assert re.fullmatch(r"[0-9a-f]{7,}", r.commit), r


def test_a_changed_raw_figure_changes_the_page(monkeypatch):
    real = results_page.read_raw

    def tampered(rel):
        data = real(rel)
        if rel.endswith("library_fusion_2026-11-29.json"):
            data["rows"][0]["status"] = "failed"
        return data
    monkeypatch.setattr(results_page, "read_raw", tampered)
    assert results_page.render() != results_page.PAGE.read_text()
