import sys
sys.path.insert(0, "/app")
from text_utils import slugify
assert slugify("  Hello, World!  ") == "hello-world"
assert slugify("Python 3.12 -- released") == "python-3-12-released"
assert slugify("---") == ""
assert slugify("a_b") == "a-b"
