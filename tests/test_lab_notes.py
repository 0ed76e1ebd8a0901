"""The lab notes (docs/lab-notes/) and their index (BENCHMARKS.md): every note is a dated file with a title, says
what rule (if any) was written before its run, every relative link in the docs resolves, BENCHMARKS.md stays a short
index of every note, and no code points into the log BENCHMARKS.md used to be."""
import datetime
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTES = ROOT / "docs" / "lab-notes"
NAME = re.compile(r"^(\d{4}-\d{2}-\d{2})-[a-z0-9]+(?:-[a-z0-9]+)*\.md$")
# [text](target) and ![alt](target), with an optional "title"
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _notes():
    notes = sorted(NOTES.glob("*.md"))
    assert notes, "docs/lab-notes/ holds no note"
    return notes


def _links(path: Path):
    """Relative link targets of a markdown file (code blocks and inline code left out), anchors removed."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    for m in LINK.finditer(text):
        target = m.group(1)
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
            continue  # http:, https:, mailto: ... or an anchor in the same file
        yield target.split("#", 1)[0]


def test_every_note_is_named_by_its_date_and_a_slug_and_starts_with_a_title():
    for path in NOTES.iterdir():
        assert path.is_file() and path.suffix == ".md", f"{path.name}: docs/lab-notes/ holds only notes (*.md)"
        m = NAME.match(path.name)
        assert m, f"{path.name}: a note is named YYYY-MM-DD-slug.md (slug in lower-case kebab-case)"
        datetime.date.fromisoformat(m.group(1))  # a real date
        first = path.read_text().split("\n", 1)[0]
        assert first.startswith("# ") and len(first) > 2, f"{path.name}: the first line is a '# ' title"


def test_every_note_says_what_rule_was_written_before_its_run():
    for path in _notes():
        text = path.read_text()
        assert re.search(r"\brule\b", text, re.I), (
            f"{path.name}: a note states its rule written before the run, or says that none was written")


def test_superseded_lines_point_at_later_notes():
    for path in _notes():
        for line in path.read_text().split("\n"):
            if not line.startswith("Superseded by"):
                continue
            targets = [t for t in _links_in(line) if NAME.match(Path(t).name)]
            assert targets, f"{path.name}: 'Superseded by' names the note that replaced it"
            for t in targets:
                assert Path(t).name[:10] >= path.name[:10], f"{path.name} is superseded by an earlier note, {t}"


def _links_in(line: str):
    return [m.group(1).split("#", 1)[0] for m in LINK.finditer(line)]


def test_relative_links_in_the_docs_resolve():
    files = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md", ROOT / "BENCHMARKS.md"]
    missing = []
    for path in files:
        for target in _links(path):
            if not (path.parent / target).exists():
                missing.append(f"{path.relative_to(ROOT)} -> {target}")
    assert not missing, "links to files that do not exist:\n" + "\n".join(missing)


def test_benchmarks_md_is_a_short_index_of_every_note():
    text = (ROOT / "BENCHMARKS.md").read_text()
    lines = text.split("\n")
    assert len(lines) < 200, f"BENCHMARKS.md has {len(lines)} lines: it is an index, the notes hold the content"
    head = "\n".join(lines[:6])
    assert "docs/results.md" in head and "docs/evaluation.md" in head, (
        "BENCHMARKS.md opens by pointing at today's numbers (docs/results.md) and the protocol (docs/evaluation.md)")
    linked = {Path(t).name for t in _links(ROOT / "BENCHMARKS.md") if t.startswith("docs/lab-notes/")}
    unlisted = [p.name for p in _notes() if p.name not in linked]
    assert not unlisted, f"notes missing from the index in BENCHMARKS.md: {unlisted}"
    rows = [line for line in lines if re.match(r"^\| \d{4}-\d{2}-\d{2} \|", line)]
    dates = [row[2:12] for row in rows]
    assert dates == sorted(dates), "the index lists the notes by date"


def test_code_points_at_lab_notes_not_at_the_old_log():
    """The content of BENCHMARKS.md moved to docs/lab-notes/: a pointer into it from code would find an index."""
    stale = []
    for folder in ("autotune", "costmodels", "hardware", "search", "benchmarks", "tests", "examples"):
        for path in (ROOT / folder).rglob("*.py"):
            if path == Path(__file__).resolve():
                continue
            for i, line in enumerate(path.read_text().split("\n"), 1):
                if "BENCHMARKS.md" in line:
                    stale.append(f"{path.relative_to(ROOT)}:{i}")
    assert not stale, "pointers into BENCHMARKS.md (name the lab note instead):\n" + "\n".join(stale)
    for target in re.findall(r"docs/lab-notes/[\w.-]+\.md", "\n".join(
            p.read_text() for folder in ("autotune", "costmodels", "hardware", "search", "benchmarks", "tests")
            for p in (ROOT / folder).rglob("*.py"))):
        assert (ROOT / target).exists(), f"code names a lab note that does not exist: {target}"
