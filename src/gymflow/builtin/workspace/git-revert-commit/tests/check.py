import subprocess, sys
def git(*args):
    return subprocess.run(["git", "-C", "/app/repo", *args], capture_output=True, text=True, check=True).stdout.strip()
subjects = git("log", "--format=%s").splitlines()
assert len(subjects) == 4 and subjects[1:] == ["Simplify greet", "Add notes", "Add greet"], subjects
sys.path.insert(0, "/app/repo")
from greet import greet
assert greet("Ada") == "Hello, Ada!"
assert open("/app/repo/NOTES.md").read().strip() == "notes"
