import os, subprocess
assert os.access("/app/fizzbuzz.sh", os.X_OK), "not executable"
out = subprocess.run(["/app/fizzbuzz.sh", "15"], capture_output=True, text=True, check=True).stdout.split()
expected = ["FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else str(i) for i in range(1, 16)]
assert out == expected, out
