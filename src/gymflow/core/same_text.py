"""Two texts compared in constant time, whatever characters they hold.

`hmac.compare_digest` (and `secrets.compare_digest`) raise TypeError on a `str` holding a
non-ASCII character, so a seal, token or key read from a store or a request and written as 'é'
crashed the command that checked it (third attacker's pass, a08: every read command, exit 3).
Compared as UTF-8 bytes, such a text is simply not equal."""

from __future__ import annotations

import hmac


def same_text(a: str, b: str) -> bool:
    return hmac.compare_digest(
        a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass")
    )
