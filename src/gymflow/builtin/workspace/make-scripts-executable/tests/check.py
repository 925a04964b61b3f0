import os, subprocess
for name in ["run.sh", "stop.sh"]:
    assert os.access(f"/app/bin/{name}", os.X_OK), name
assert os.path.islink("/app/bin/start") and os.readlink("/app/bin/start") == "run.sh"
assert subprocess.run(["/app/bin/start"], capture_output=True, text=True).stdout.strip() == "running"
