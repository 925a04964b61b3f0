import sys
sys.path.insert(0, "/app")
from stats import median, mean
assert median([3, 1, 2]) == 2
assert median([4, 1, 3, 2]) == 2.5
assert median([10, 20]) == 15
assert mean([1, 2, 3]) == 2
