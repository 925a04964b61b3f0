import sys
sys.path.insert(0, "/app")
from validators import is_valid_email as ok
for good in ["a@b.co", "first.last+tag@mail.example.org", "x_y-z@sub-domain.io"]:
    assert ok(good), good
for bad in ["a@b", "@b.co", "a@@b.co", ".a@b.co", "a b@c.de", "a@b.c", "a@b.co ", "a@-.c0"]:
    assert not ok(bad), bad
