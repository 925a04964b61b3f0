import os, subprocess
def run(args, env=None):
    return subprocess.run(["/app/greet.sh", *args], capture_output=True, text=True, env={"PATH": os.environ["PATH"], **(env or {})}).stdout.strip()
assert run([]) == "Hello, world!"
assert run([], {"GREET_NAME": "Ada"}) == "Hello, Ada!"
assert run(["Bob"], {"GREET_NAME": "Ada"}) == "Hello, Bob!"
