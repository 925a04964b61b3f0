import subprocess
def git(*args):
    return subprocess.run(["git", "-C", "/app/project", *args], capture_output=True, text=True, check=True).stdout.strip()
assert git("rev-parse", "--abbrev-ref", "HEAD") == "hotfix"
assert git("rev-parse", "HEAD") == git("rev-parse", "v1.0^{commit}")
assert open("/app/project/version.txt").read().strip() == "1"
