import subprocess
out = subprocess.run(["python3", "-c", "import shapes; print(shapes.area('square', 3)); print(round(shapes.area('circle', 1), 2))"], cwd="/app", capture_output=True, text=True)
assert out.returncode == 0, out.stderr
assert out.stdout.split() == ["9", "3.14"], out.stdout
