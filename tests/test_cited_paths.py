"""Every repository path the README and the notebooks cite exists (issue 28: they cited a
THEORY.md the repository does not have). A path is a word that starts with a top-level folder
of the repository (docs/theory.md, benchmarks/results/bench/) or a file name with a known
suffix (interval_coverage.md: a file of that name somewhere in the repository); placeholders
(FILE.json, listed) and the files a cited command writes are named below, not checked."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP = ("benchmarks", "docs", "experiments", "lp", "verifiers", "proofs", "cli", "decode", "tests",
       "notebooks", "examples")
SUFFIXES = ("md", "py", "json", "jsonl", "png", "pdf", "csv", "parquet", "ipynb", "sh", "toml")
PATH = re.compile(r"(?<![\w/.~$-])((?:" + "|".join(TOP) + r")/[\w./-]*[\w/]|[\w.-]+\.(?:"
                  + "|".join(SUFFIXES) + r"))(?![\w/])")
PLACEHOLDERS = {"FILE.json", "FILE.py", "INSTANCE.json"}  # the README's usage lines
NOT_IN_THE_REPOSITORY = {
    "inst.json": "README: written by the `speclp instance --out inst.json` it is cited in",
    "my_sampler.py": "README: the user's own sampler file in the audit example",
}


def repository_files() -> set[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    return set(listed)


def cited(text: str) -> set[str]:
    """The repository paths in `text` (ranges such as notebooks/01..07 and the usage
    placeholders left out)."""
    words = {word.rstrip("/.") for word in PATH.findall(text)}
    return {w for w in words if ".." not in w and w not in PLACEHOLDERS}


def documents() -> list[tuple[str, str]]:
    """README.md whole; each notebook's markdown cells, and the repository paths (a top-level
    folder first) in its code cells (file names in code are mostly files it writes)."""
    docs = [("README.md", (ROOT / "README.md").read_text())]
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        markdown = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        code_paths = " ".join(p for p in cited(code) if p.split("/")[0] in TOP)
        docs.append((f"notebooks/{nb.name}", markdown + "\n" + code_paths))
    return docs


def test_the_extraction_finds_paths_and_leaves_placeholders():
    text = ("see docs/theory.md section 3, `benchmarks/results/bench/` and interval_coverage.md; "
            "speclp gap FILE.json; notebooks/01..07; THEORY.md")
    assert cited(text) == {"docs/theory.md", "benchmarks/results/bench", "interval_coverage.md",
                           "THEORY.md"}


@pytest.mark.parametrize("name,text", documents(), ids=[n for n, _ in documents()])
def test_every_cited_path_exists(name: str, text: str):
    files = repository_files()
    folders = {str(p) for f in files for p in Path(f).parents}
    names = {Path(f).name for f in files}
    missing = sorted(p for p in cited(text) if p not in NOT_IN_THE_REPOSITORY
                     and p not in files and p not in folders
                     and not ("/" not in p and p in names))
    assert not missing, f"{name} cites paths the repository does not have: {missing}"


CITES_A_SECTION = re.compile(r"docs/theory\.md|\b(?:section|Lemma|Theorem) \d")
TABLE_ROW = re.compile(r"^\| `([\w/.-]+\.py):(\d+)` \|", re.MULTILINE)


def applied_rows(text: str) -> list[tuple[str, int]]:
    """docs/citations.md's Table A rows (file, line) of the files its "Applied" paragraph lists."""
    applied_part = text.split("## Applied", 1)[1].split("\n## ", 1)[0]
    applied = set(re.findall(r"`([\w/.-]+\.py)`", applied_part))
    table_a = text.split("## Table A", 1)[1].split("\n## ", 1)[0]
    return [(f, int(n)) for f, n in TABLE_ROW.findall(table_a) if f in applied]


def test_applied_citation_rows_point_at_a_cited_section():
    """Each Table A row of an applied file names the line where its docs/theory.md citation sits
    now (not the line of commit 5226c37, which moved)."""
    rows = applied_rows((ROOT / "docs" / "citations.md").read_text())
    assert len(rows) >= 15  # the applied files' rows of Table A (a parse that finds none fails)
    wrong = [f"{f}:{n}" for f, n in rows
             if not CITES_A_SECTION.search(((ROOT / f).read_text().splitlines() + [""] * n)[n - 1])]
    assert not wrong, f"docs/citations.md rows whose line cites no section: {wrong}"


def test_applied_rows_scan_sees_a_wrong_line():
    text = ("## Applied\n\napplied in `a.py`, `b.py`.\n\n## Table A\n\n| `a.py:3` | `x` | 1 |\n"
            "| `c.py:1` | `y` | 2 |\n\n## Table B\n| `b.py:9` | z |\n")
    assert applied_rows(text) == [("a.py", 3)]
    assert CITES_A_SECTION.search("see docs/theory.md section 3") and not CITES_A_SECTION.search("x = 3")
