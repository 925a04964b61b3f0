import pathlib, subprocess
for path in pathlib.Path("/app/src").rglob("*.py"):
    assert "calc_total" not in path.read_text(), path
out = subprocess.run(["python3", "src/main.py"], cwd="/app", capture_output=True, text=True)
assert out.stdout.strip() == "42", out
import sys
sys.path.insert(0, "/app/src")
from report import report
assert report([1, 2]) == "total: 3"
