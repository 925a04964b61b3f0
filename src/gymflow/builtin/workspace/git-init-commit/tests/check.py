import subprocess
def git(*args):
    return subprocess.run(["git", "-C", "/app", *args], capture_output=True, text=True, check=True).stdout.strip()
assert git("rev-parse", "--abbrev-ref", "HEAD") == "main"
assert git("log", "--format=%s|%an|%ae") == "Initial import|Gym Flow|gym@example.com"
assert sorted(git("ls-files").split()) == ["app.py", "docs/usage.md"]
assert git("status", "--porcelain") == ""
