"""What a config may say about the world outside gymflow, and the rules that keep credentials
out of it: a server's URL (http or https, with a host, no key in any part), where data goes (a
folder, or an object-storage URL without credentials) and the name of the variable holding a
key (never the key, never gymflow's seal key). Each rule is a validator and the same rule as a
JSON Schema pattern, so the Prefect form refuses what the config refuses."""

from __future__ import annotations

import re
from typing import Annotated, cast

from pydantic import AfterValidator, WithJsonSchema

#: A URL without `user:password@` (for the Prefect form: the validators below say it in words).
URL_WITHOUT_CREDENTIALS = (
    r"^(?:[A-Za-z][A-Za-z0-9+.-]*://[^/?#@]*|[^/?#@:]*(?::[0-9]+)?)(?:[/?#].*)?$"
)
#: An environment variable's name, as POSIX shells accept it.
ENV_VAR_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_KEY_PREFIXES = (
    "sk-", "sk_", "pk-", "rk-", "hf_", "gsk_", "xai-", "aiza", "ghp_", "github_pat_", "bearer ",
)  # fmt: skip
#: Parameter names that carry a credential (`?key=` for Google APIs, `?api-key=`,
#: `?access_token=`, a signature): stored and shown with the URL as surely as `user:pw@`.
_CREDENTIAL_WORDS = ("key", "token", "secret", "pass", "pwd", "auth", "sig", "credential")


def _any_case(word: str) -> str:
    """`word` as a case-insensitive pattern: JSON Schema's (ECMAScript) patterns take no flags."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in word)


def _either(words: tuple[str, ...]) -> str:
    return "(?:" + "|".join(map(_any_case, words)) + ")"


#: The non-ASCII characters whose NFKC form holds `@ / : ? #`.
_DELIMITER_LOOKALIKES = (
    "\u2047\u2048\u2049\u2100\u2101\u2105\u2106\u2a74\ufe13\ufe16\ufe55\ufe56\ufe5f\ufe6b"
    "\uff03\uff0f\uff1a\uff1f\uff20"
)
#: What a URL must not hold, each a pattern matched from the URL's start, and what it is in
#: words. One rule for every place a URL is given: the config's validator tries them one by one
#: (to say which), and the Prefect form's JSON Schema pattern is their negation, so the form
#: refuses before a flow run exists exactly what the config refuses. A URL is read as pieces
#: between `/ ? # & ; =` (the host, path segments, `;` parameters, query and fragment names and
#: values): a key was stored when it sat in a query value or a path segment
#: (`…/v1?q=sk-proj-…`, `…/sk-proj-…/v1`), where the parameter-name check never looked.
_URL_REFUSALS: tuple[tuple[str, str], ...] = (
    # RFC 3986's unreserved characters never need an escape; an escape hides a word from the
    # patterns below (`%6Bey` is `key`), and a pattern cannot decode one.
    (
        r".*%(?:3[0-9]|[46][1-9A-Fa-f]|[57][0-9Aa]|2[DEde]|5[Ff]|7[Ee])",
        "a percent-escaped letter, digit or -._~ (it would hide a key's name or prefix)",
    ),
    (
        rf".*[?#&;][^=&#;/]*{_either(_CREDENTIAL_WORDS)}",
        "a parameter named for a credential (" + ", ".join(_CREDENTIAL_WORDS) + ")",
    ),
    # NFKC reads these as `@ / : ? #` (`user:pw＠host` is userinfo to a parser that
    # normalises): every non-ASCII character whose NFKC form holds one (tests/faults checks
    # the list against unicodedata)
    (
        f".*[{_DELIMITER_LOOKALIKES}]",
        "a character that stands for @, /, :, ? or # (a full-width at sign, ...)",
    ),
    # anywhere a word starts, not only a piece: `?q=Bearer%20sk-…`, `/v1/x.sk-…`, `?q=:sk-…`
    (
        ".*(?:[^A-Za-z0-9]|%[0-9A-Fa-f]{2})"
        + _either(tuple(p for p in _KEY_PREFIXES if re.fullmatch(r"[\w-]+", p))),
        "a part that begins as API keys do (sk-, hf_, AIza, ghp_, ...)",
    ),
    # as api_key_env's rule: keys are long runs of letters and digits, wherever one starts
    # after the first `? # ; =` (`?q=x-AKIA…`, `?q=ya29.a0…`, not only right after `=`), not in
    # the path before it: account and deployment ids in gateway URLs look the same and are not
    # secrets. Linear time: a run is tried once, from the character before it (`.*=[^&#;]*`
    # took 2 s on 20,000 `=`).
    (
        r"[^?#;=]*[?#;=](?:.*[^A-Za-z0-9])?(?=[A-Za-z0-9]{20})[A-Za-z0-9]*[0-9]",
        "a parameter that holds what looks like a key (20 or more letters and digits)",
    ),
)


def refuse_url_credentials(url: str | None) -> str | None:
    """A URL holding credentials would be stored (runs.config_json), shown (report, `--ping`) and
    sent to Prefect with the config: refused (pydantic names the field), never echoed."""
    if url is None:
        return None
    if not re.match(URL_WITHOUT_CREDENTIALS, url):
        raise ValueError(
            "a URL must not carry credentials (user:password@host): put the key in an "
            "environment variable and name it in model.api_key_env"
        )
    for pattern, what in _URL_REFUSALS:
        if re.match(pattern, url):
            raise ValueError(
                f"a URL must not carry credentials, and this one holds {what}: put the key in "
                "an environment variable and name it in model.api_key_env"
            )
    return url


#: The variable holding gymflow's seal key (`gymflow.store.seal`): gymflow's own secret, which
#: never goes to a server as a credential.
SEAL_KEY_ENV = "GYMFLOW_SEAL_KEY"


def refuse_key_as_env_name(value: str | None) -> str | None:
    """`api_key_env` names a variable; a value that looks like the key itself is refused (it
    would be stored with the config) without being repeated in the message, and so is the
    variable of gymflow's seal key: a config from anyone naming it sent the key to its server
    as the bearer."""
    if value is None:
        return None
    if value.upper() == SEAL_KEY_ENV:
        raise ValueError(
            f"{SEAL_KEY_ENV} holds gymflow's seal key, which is never sent to a server: name the "
            "variable holding the server's own key"
        )
    looks_like_key = (
        not re.match(ENV_VAR_NAME, value)
        or value.lower().startswith(_KEY_PREFIXES)
        # names are words joined by underscores; keys are long runs of letters and digits
        # (mixed case, or upper case as AWS's AKIA... key ids)
        or (len(value) >= 20 and "_" not in value.strip("_") and any(c.isdigit() for c in value))
    )
    if looks_like_key:
        raise ValueError(
            "it must name an environment variable holding the key (e.g. OPENAI_API_KEY), "
            "and this value looks like a key itself: export the key in a variable and give "
            "its name"
        )
    return value


# The two rules above as JSON Schema patterns, built from the same patterns and words, so the
# Prefect form refuses before a flow run exists what the config refuses when it is validated
# (the form held a key as `api_key_env`, and `user:password@`, in a flow run's parameters).
# tests/faults checks that pattern and function agree.
#: A URL none of `_URL_REFUSALS` matches, without `user:password@`.
URL_PATTERN = (
    "^"
    + "".join(f"(?!{pattern})" for pattern, _ in _URL_REFUSALS)
    + URL_WITHOUT_CREDENTIALS.removeprefix("^")
)
#: A variable's name that does not look like a key (a key's prefix; one long run with digits),
#: nor the seal key's.
API_KEY_ENV_PATTERN = (
    f"^(?!{_any_case(SEAL_KEY_ENV)}$)"
    f"(?!{'|'.join(_any_case(p) for p in _KEY_PREFIXES if re.fullmatch(r'[A-Za-z_]+', p))})"
    "(?!(?=.{20})_*[A-Za-z0-9]*[0-9][A-Za-z0-9]*_*$)" + ENV_VAR_NAME.removeprefix("^")
)
#: A server's address: http or https, with a host. Without a scheme (`//host:port/v1`,
#: `host:port/v1`) aiohttp still sent the request as HTTP, with the key the config names, while
#: `named_servers` (which finds a store's servers by `://`) saw no server in it: a run someone
#: sent had `decide --confirm` and `reverify --check` call the sender's server with the
#: owner's keys (attack pass 6, s10 and s11).
HTTP_URL = r"^[Hh][Tt][Tt][Pp][Ss]?://[^/?#@\s]+(?:[/?#].*)?$"


def require_http_url(url: str | None) -> str | None:
    if url is not None and not re.match(HTTP_URL, url):
        raise ValueError(
            "a server's URL begins with http:// or https:// and names its host "
            "(e.g. http://127.0.0.1:8000/v1)"
        )
    return url


#: A model server's URL, wherever one is given (config, Prefect form, judge parameters).
ServerUrl = Annotated[
    str,
    AfterValidator(refuse_url_credentials),
    AfterValidator(require_http_url),
    WithJsonSchema({"type": "string", "pattern": f"^(?={HTTP_URL[1:]})" + URL_PATTERN[1:]}),
]


def named_servers(config: object) -> list[str]:
    """Every address (`scheme://…`) a config or parameters hold, anywhere in them: where a run
    of it sends requests, with the keys it names. Every server a run calls is a `ServerUrl`,
    which holds `://` (`require_http_url`): a value without it is refused before any call."""
    values: list[object] = []
    if isinstance(config, dict):
        values = list(cast("dict[object, object]", config).values())
    elif isinstance(config, list):
        values = list(cast("list[object]", config))
    elif isinstance(config, str):
        return [config] if "://" in config else []
    return [url for value in values for url in named_servers(value)]


def refuse_location_credentials(location: str | None) -> str | None:
    """A folder is any path; a URL where data goes (`scheme://…`) is checked as every URL is."""
    return refuse_url_credentials(location) if location and "://" in location else location


#: Where a run's or shards' data goes: a folder here, or an object-storage URL without
#: credentials (a folder named `runs/sk-learn` is no key; `s3://AKIA…:secret@bucket` is one).
StorageLocation = Annotated[
    str,
    AfterValidator(refuse_location_credentials),
    WithJsonSchema({"type": "string", "pattern": "^(?!.*://)|" + URL_PATTERN}),
]
#: The name of the environment variable holding an API key, wherever one is given.
ApiKeyEnv = Annotated[
    str,
    AfterValidator(refuse_key_as_env_name),
    WithJsonSchema({"type": "string", "pattern": API_KEY_ENV_PATTERN}),
]
