"""Secrets in the shapes issue 14 names, for tests that send them through a
channel (an error, a log, a transcript, a results file) and check none is left.

``SAID`` is what a peer writes, one shape a line; ``SECRETS`` are the parts of
it that must never be seen again (each unique, so a hit is never a false one).
"""

from __future__ import annotations

PEM_BODY = (
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
    "MzEfYyjiWA4R4M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu",
)

#: (a line as a peer writes it, the secret in it)
SHAPES = (
    ('password: "correct horse battery"', "correct horse battery"),
    ("token='alpha7q, beta9q'", "alpha7q, beta9q"),
    ("cloning https://deploy:Pa55w0rdInUrl@git.example.com/x.git", "Pa55w0rdInUrl"),
    ("key id AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("temporary key ASIAQWERTYUIOPASDFGH", "ASIAQWERTYUIOPASDFGH"),
    ("aws_session_token=FwoGZXIvYXdzEJr/AbCdEf+GhIj==", "FwoGZXIvYXdzEJr"),
    ("GitHub ghp_0123456789abcdefghijABCDEFGHIJ0123", "ghp_0123456789abcdefghij"),
    ("pat github_pat_11ABCDEFG0_abcdefghijklmnopqrstuv", "github_pat_11ABCDEFG0_abc"),
    ("OpenAI sk-proj-0123456789abcdefABCDEF", "sk-proj-0123456789abcdef"),
    ("Anthropic sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWx", "sk-ant-api03-AbCdEfGh"),
    ("Slack xoxb-1234567890-abcdefghijkl", "xoxb-1234567890-abcdef"),
    ("GitLab glpat-AbCdEfGhIjKlMnOpQrSt", "glpat-AbCdEfGhIjKlMnOpQrSt"),
    (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXBhcnQ",
        "eyJzdWIiOiIxMjM0In0",
    ),
    ("Authorization: Bearer tok3nBearerValue99", "tok3nBearerValue99"),
    ("Google AIzaSyA-0123456789abcdefghijklmnopqrstu", "AIzaSyA-0123456789abcdef"),
    (
        "DefaultEndpointsProtocol=https;AccountName=acct;"
        "AccountKey=QXp1cmVLZXlWYWx1ZQ+/==;EndpointSuffix=core.windows.net",
        "QXp1cmVLZXlWYWx1ZQ",
    ),
    (
        "\n".join(
            ["-----BEGIN PRIVATE KEY-----", *PEM_BODY, "-----END PRIVATE KEY-----"]
        ),
        PEM_BODY[0][:40],
    ),
)

#: Every shape on a line of its own, then the one-line shapes again on the last
#: line (a message that shows only the last line of stderr must hide them too).
SAID = (
    "\n".join(f"error: {line}" for line, _ in SHAPES)
    + "\nlast: "
    + " | ".join(line for line, _ in SHAPES if "\n" not in line)
    + "\n"
)
SECRETS = (*(secret for _, secret in SHAPES), PEM_BODY[1][:40])


def leaked(text: str) -> list[str]:
    """The secrets of the corpus that ``text`` still holds."""
    return [secret for secret in SECRETS if secret in text]
