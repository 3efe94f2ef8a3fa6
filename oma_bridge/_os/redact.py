"""Find secrets in text an agent wrote, so none reaches an error or a log.

Every match on every line is replaced, not only the first ``key: value``.
``redact_json`` does the same for a JSON value (a protocol frame), where a
secret can also hide in structure: under a key that looks secret, or as the
``value`` of a ``{"name": ..., "value": ...}`` pair whose name does.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ..bridge.messages import JSONValue

REDACTED = "[REDACTED]"

#: "auth" but not "authenticate", "authentication": prose such as "authenticate:
#: the agent ..." lost its next word, while "Authorization: ..." keeps its match.
_SECRET_NAME = (
    r"(?:api[_-]?key|apikey|secret|token|passw(?:or)?d|passphrase|pwd|credential|auth(?!enticat)"
    r"|private[_-]?key|access[_-]?key|session[_-]?key|account[_-]?key|cookie)"
)

#: A secret-looking name and its ``=`` or ``:``, its quotes (escaped too) kept.
#: The name's parts around the secret word are bounded: unbounded, a long word
#: holding it many times ("tokentoken…", 50 KB) took 45 s (backtracking).
_NAMED = (
    rf"""(?<![\w.-])[\w.-]{{0,64}}{_SECRET_NAME}[\w.-]{{0,64}}(?:\\*["'])?\s*[=:]\s*"""
)


@functools.cache
def _patterns() -> tuple[tuple[re.Pattern[str], str], ...]:
    # Compiled on first use: redaction runs on failures, not on every start.
    return (
        # PEM private keys, also when the tail cut the END line off.
        (
            re.compile(
                r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?"
                r"(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
                re.DOTALL,
            ),
            REDACTED,
        ),
        # Authorization headers.
        (
            re.compile(
                r"\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE
            ),
            rf"\1 {REDACTED}",
        ),
        # URLs with credentials: scheme://user:password@host keeps the user (the
        # scheme bounded: unbounded, "eyJaaaa." * 10,000 backtracked for 5 s).
        (
            re.compile(
                r"\b([a-z][a-z0-9+.-]{0,31}://[^/\s:@]*:)[^/\s@]+@", re.IGNORECASE
            ),
            rf"\1{REDACTED}@",
        ),
        # The same inside JSON text (a log line, a frame preview), where the
        # quotes are escaped: {\"password\": \"a b, c\"}.
        (
            re.compile(
                rf"""({_NAMED})(\\+["'])(?:(?!\2)[^\n])+\2""",
                re.IGNORECASE,
            ),
            rf"\1\2{REDACTED}\2",
        ),
        # A quoted value, which may hold spaces or commas: password: "a b, c".
        (
            re.compile(
                rf"""({_NAMED})(["'])(?:(?!\2)[^\n\\]|\\.)+\2""",
                re.IGNORECASE,
            ),
            rf"\1\2{REDACTED}\2",
        ),
        # NAME=value, "name": "value", name: value, where the name looks secret.
        (
            re.compile(
                rf"""({_NAMED}["']?)([^\s"',;]{{3,}})""",
                re.IGNORECASE,
            ),
            rf"\1{REDACTED}",
        ),
        # Well-known token shapes, wherever they stand.
        (
            re.compile(
                r"\b(?:sk-[A-Za-z0-9_-]{16,}"
                r"|(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
                r"|xox[abprs]-[A-Za-z0-9-]{10,}|xapp-[0-9]-[A-Za-z0-9-]{10,}"
                r"|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}|GOCSPX-[A-Za-z0-9_-]{20,}"
                r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
                r"|AIza[0-9A-Za-z_-]{35}|ya29\.[0-9A-Za-z_-]{20,}"
                r"|glpat-[0-9A-Za-z_-]{20,}|npm_[0-9A-Za-z]{36}|hf_[0-9A-Za-z]{30,}"
                r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"
            ),
            REDACTED,
        ),
        # Azure shared access signatures in a URL or a connection string.
        (
            re.compile(r"([?&;]sig=)[^&\s\"']{8,}", re.IGNORECASE),
            rf"\1{REDACTED}",
        ),
    )


@functools.cache
def _name_looks_secret() -> re.Pattern[str]:
    return re.compile(_SECRET_NAME, re.IGNORECASE)


# Names that match ("pwd") but hold a path, which an error needs to stay useful.
_NOT_SECRET = frozenset({"PWD", "OLDPWD"})


def is_secret_name(name: str) -> bool:
    """Whether a variable, key or header name looks like it holds a secret."""
    return name not in _NOT_SECRET and _name_looks_secret().search(name) is not None


#: Variable names ending so hold a key or a password (OPENAI_KEY, DB_PASS),
#: though in running text "monkey=" or "bypass:" are no secret's names.
_SECRET_VARIABLE_ENDS = ("_KEY", "_PASS")


def secret_values(env: Mapping[str, str]) -> tuple[str, ...]:
    """Values of variables whose names look secret, longest first."""
    values = {
        v
        for k, v in env.items()
        if len(v) >= 6
        and (is_secret_name(k) or k.upper().endswith(_SECRET_VARIABLE_ENDS))
    }
    return tuple(sorted(values, key=len, reverse=True))


def redact(text: str, values: Iterable[str] = ()) -> str:
    """Replace every secret in ``text``: known values first, then known shapes."""
    for value in values:
        if value in text:
            text = text.replace(value, REDACTED)
    patterns = _patterns()
    text = patterns[0][0].sub(patterns[0][1], text)  # whole PEM blocks first
    text = _key_tails(text)
    for pattern, replacement in patterns[1:]:
        text = pattern.sub(replacement, text)
    return text


@functools.cache
def _key_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The END line of a private key, and one line of its base64 (compiled on
    first use, like ``_patterns``: most runs never redact anything)."""
    return re.compile(r"-----END [A-Z ]*PRIVATE KEY-----"), re.compile(
        r"[A-Za-z0-9+/=]+\r?"
    )


def _key_tails(text: str) -> str:
    """Redact the key lines before an END line whose BEGIN line a tail cut off.

    Walked back a line at a time from each END marker: the regex
    ``(?:^[A-Za-z0-9+/=]+\\n)*-----END`` was tried at every line, quadratic
    in the lines of base64 that no END follows (260 KB took 5.7 s).
    """
    key_end, key_line = _key_patterns()
    out: list[str] = []
    done = 0  # text[:done] is in out already
    for match in key_end.finditer(text):
        start = match.start()
        while start > done and text[start - 1] == "\n":
            line = text.rfind("\n", 0, start - 1) + 1
            if line < done or not key_line.fullmatch(text, line, start - 1):
                break
            start = line
        out += (text[done:start], REDACTED)
        done = match.end()
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


def redact_json(value: JSONValue, values: Iterable[str] = ()) -> JSONValue:
    """A copy of a JSON value with every secret replaced, the shape kept.

    A string under a key that looks secret (``"api_key"``, ``"password"``), or
    the ``"value"`` of an object whose ``"name"`` looks secret (ACP's env
    variables and HTTP headers), is replaced whole; other strings go through
    ``redact``. Numbers stay: ``"totalTokens": 12`` is a count, not a secret.
    Strings are redacted one by one, since a pattern run over JSON text could
    eat a quote and leave text that is no longer JSON.
    """
    values = tuple(values)
    return _redact_value(value, values)


def _redact_value(value: JSONValue, values: tuple[str, ...]) -> JSONValue:
    if isinstance(value, str):
        return redact(value, values)
    if isinstance(value, list):
        return [_redact_value(v, values) for v in value]
    if not isinstance(value, dict):
        return value
    name = value.get("name")
    named_secret = isinstance(name, str) and is_secret_name(name)
    return {
        k: REDACTED
        if isinstance(v, str) and (is_secret_name(k) or (named_secret and k == "value"))
        else _redact_value(v, values)
        for k, v in value.items()
    }
