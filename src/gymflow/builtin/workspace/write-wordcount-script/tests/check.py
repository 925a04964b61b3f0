import subprocess, tempfile
with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
    f.write("b a B c a-b A\nc's C")
out = subprocess.run(["python3", "/app/wordcount.py", f.name], capture_output=True, text=True, check=True).stdout
assert out.split("\n")[:4] == ["a 3", "b 3", "c 3", "s 1"], out
