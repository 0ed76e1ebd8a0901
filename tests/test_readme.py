"""README.md for a newcomer: at most about 1,200 words, its Python quickstart runs as written, and
every local link points at a file of the repository."""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_is_short():
    words = len(README.split())
    assert words <= 1250, f"README.md has {words} words (at most about 1,200)"


def test_quickstart_runs_as_written(tmp_path):
    section = README.split("## Quickstart in Python", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(code.strip().splitlines()) <= 20
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AUTOTUNE_NO_MICROBENCH": "1"}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert re.search(r"predicted x\d+\.\d{3}, measured x\d+\.\d{3}", r.stdout), r.stdout
    assert (tmp_path / "fused.hlo").read_text().startswith("// autotune:")


def test_local_links_exist():
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if "://" in target:
            continue
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"
