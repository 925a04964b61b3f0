import sys
sys.path.insert(0, "/app")
from calc import divide, percent
assert divide(7, 2) == 3.5
assert divide(-9, 4) == -2.25
assert percent(1, 3) == 33.3
assert percent(1, 8) == 12.5
try:
    divide(1, 0)
except ZeroDivisionError:
    pass
else:
    raise AssertionError("divide(1, 0) did not raise")
