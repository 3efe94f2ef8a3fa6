"""Redaction: every secret on every line goes; the text around it stays useful."""

from __future__ import annotations

import json

import pytest

from oma_bridge._os.exit import StderrTail, exit_signal
from oma_bridge._os.redact import REDACTED, redact, secret_values

PEM_BODY = [
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
    "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu",
    "NMoSfm76oqFvAp8Gy0iz5sxjZmSnXyCdPEovGhLa0VzMaQ8s+CLOyS56YyCFGeJZ",
]
PEM = "\n".join(["-----BEGIN PRIVATE KEY-----", *PEM_BODY, "-----END PRIVATE KEY-----"])


def assert_gone(text: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in text, f"{secret!r} survived in {text!r}"


def test_every_key_value_secret_on_one_line_is_redacted() -> None:
    line = (
        "PASSWORD=hunter2xyz user=alice API_KEY: abc123def "
        '"client_secret": "s3cr3t-value", db_token=tok-999; mode=fast'
    )
    out = redact(line)
    assert_gone(out, "hunter2xyz", "abc123def", "s3cr3t-value", "tok-999")
    assert out.count(REDACTED) == 4
    # The names and the harmless pairs between them stay.
    for kept in ("PASSWORD=", "user=alice", "API_KEY: ", "client_secret", "mode=fast"):
        assert kept in out


@pytest.mark.parametrize(
    "secret",
    [
        "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
        "sk-proj-0123456789abcdefABCDEF",
        "ghp_0123456789abcdefghijABCDEFGHIJ",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnop",
        "xoxb-1234567890-abcdefghij",
        "AKIAIOSFODNN7EXAMPLE",
        "AIzaSyA-0123456789abcdefghijklmnopqrstu",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLXBhcnQ",
    ],
)
def test_well_known_token_shapes_are_redacted_anywhere(secret: str) -> None:
    out = redact(f"request failed (key {secret}) after 3 tries")
    assert out == f"request failed (key {REDACTED}) after 3 tries"


def test_several_token_shapes_on_one_line() -> None:
    first = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
    second = "ghp_0123456789abcdefghijABCDEFGHIJ"
    third = "AKIAIOSFODNN7EXAMPLE"
    out = redact(f"{first} then {second} and {third}.")
    assert out == f"{REDACTED} then {REDACTED} and {REDACTED}."


@pytest.mark.parametrize("scheme", ["Bearer", "Basic", "Token", "bearer"])
def test_authorization_headers(scheme: str) -> None:
    out = redact(f"> Authorization: {scheme} dXNlcjpwYXNzd29yZA== (retrying)")
    assert_gone(out, "dXNlcjpwYXNzd29yZA")
    assert out.startswith("> Authorization: ")
    assert out.endswith(" (retrying)")


def test_a_header_and_a_key_on_the_same_line() -> None:
    out = redact("Authorization: Bearer abcdefgh12345678 x-api-key: zyx987654")
    assert_gone(out, "abcdefgh12345678", "zyx987654")


def test_pem_private_key_block() -> None:
    out = redact(f"loaded key:\n{PEM}\nstarting server on :8080\n")
    assert_gone(out, *PEM_BODY)
    assert out.startswith("loaded key:\n")
    assert out.endswith("starting server on :8080\n")


def test_pem_private_key_without_its_end_line() -> None:
    cut = "\n".join(PEM.splitlines()[:-1])
    out = redact(f"loaded key:\n{cut}")
    assert_gone(out, *PEM_BODY)
    assert out.startswith("loaded key:\n")


def test_pem_private_key_without_its_begin_line() -> None:
    # What is left when a bounded tail cut the start of the block off.
    cut = "\n".join(PEM.splitlines()[1:])
    out = redact(f"{cut}\nstarting server on :8080\n")
    assert_gone(out, *PEM_BODY)
    assert out.endswith("starting server on :8080\n")


def test_public_material_is_not_a_private_key() -> None:
    text = (
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----"
    )
    assert redact(text) == text


def test_known_values_are_replaced_wherever_they_stand() -> None:
    out = redact("connecting as q8Zt-literal-4471@db", values=["q8Zt-literal-4471"])
    assert out == f"connecting as {REDACTED}@db"


def test_longer_values_go_first_so_no_fragment_is_left() -> None:
    env = {"SHORT_TOKEN": "abcdef", "LONG_TOKEN": "abcdef-and-more"}
    values = secret_values(env)
    assert values == ("abcdef-and-more", "abcdef")
    out = redact("got abcdef-and-more and abcdef", values)
    assert out == f"got {REDACTED} and {REDACTED}"


def test_secret_values_picks_secret_looking_names_only() -> None:
    env = {
        "ANTHROPIC_API_KEY": "value-of-api-key",
        "GITHUB_TOKEN": "value-of-token",
        "DB_PASSWORD": "value-of-password",
        "MY_SECRET": "value-of-secret",
        "AWS_ACCESS_KEY_ID": "value-of-access-key",
        "AZURE_OPENAI_KEY": "value-of-a-key",
        "SIGNING_KEY": "value-of-signing-key",
        "DB_PASS": "value-of-pass",
        "GPG_PASSPHRASE": "value-of-passphrase",
        "KEYBOARD_LAYOUT": "dvorak-layout",
        "BYPASS_CACHE": "always-value",
        "HOME": "/home/someone",
        "LANG": "C.UTF-8",
        "EDITOR": "vim-value",
        "API_TOKEN": "short",  # too short to replace everywhere safely
    }
    assert set(secret_values(env)) == {
        "value-of-api-key",
        "value-of-token",
        "value-of-password",
        "value-of-secret",
        "value-of-access-key",
        "value-of-a-key",
        "value-of-signing-key",
        "value-of-pass",
        "value-of-passphrase",
    }


def test_the_working_directory_is_not_a_secret_value() -> None:
    # "pwd" is a secret-looking name part, but $PWD and $OLDPWD hold paths.
    env = {
        "PWD": "/home/someone/project",
        "OLDPWD": "/home/someone",
        "DB_PWD": "pw123456",
    }
    assert secret_values(env) == ("pw123456",)
    out = redact("no such file: /home/someone/project/a.txt", secret_values(env))
    assert out == "no such file: /home/someone/project/a.txt"


@pytest.mark.parametrize(
    "text",
    [
        "Traceback (most recent call last):\n"
        '  File "/srv/app/main.py", line 12, in <module>\n'
        "ValueError: expected 3 items, got 2\n",
        "error[E0308]: mismatched types at src/lib.rs:10:5\n",
        "GET https://api.example.com/v1/items?page=2 -> 503 Service Unavailable\n",
        "Compiling 14 files with --release; done in 3.2 s (exit code 1)\n",
        "user=alice host=db.internal port=5432 retries=3\n",
    ],
)
def test_ordinary_diagnostics_are_left_alone(text: str) -> None:
    assert redact(text) == text


# -- the stderr tail ------------------------------------------------------------------


def test_stderr_tail_keeps_only_the_last_bytes() -> None:
    tail = StderrTail(64)
    for i in range(1000):
        tail.feed(f"line {i:04d}\n".encode())
    text = tail.text()
    assert len(text.encode()) <= 64
    assert text.endswith("line 0999\n")
    # The first, cut line is dropped rather than shown half.
    assert text.startswith("line ")


def test_stderr_tail_drops_a_cut_first_line_that_may_hold_half_a_secret() -> None:
    tail = StderrTail(40)
    tail.feed(b"API_KEY=abcdefghijklmnopqrstuvwxyz0123456789\nnext line\n")
    text = tail.text()
    assert text == "next line\n"


def test_stderr_tail_redacts_and_tolerates_bad_utf8() -> None:
    tail = StderrTail(1024)
    tail.feed(b"\xff\xfe oops PASSWORD=hunter2xyz\n")
    text = tail.text(["hunter2xyz"])
    assert "hunter2xyz" not in text
    assert "oops" in text


def test_stderr_tail_can_start_on_a_utf8_boundary() -> None:
    tail = StderrTail(4, utf8_start=True)
    tail.feed("aé€".encode())  # 1 + 2 + 3 bytes: keeping 4 would cut "é"
    assert tail.data() == "€".encode()
    assert tail.dropped


@pytest.mark.parametrize(
    ("code", "name"),
    [(0, None), (3, None), (-9, "SIGKILL"), (-15, "SIGTERM"), (-200, "signal 200")],
)
def test_exit_signal_names_the_signal_of_a_negative_exit_code(
    code: int, name: str | None
) -> None:
    assert exit_signal(code) == name


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ('password: "correct horse battery staple" then', "horse battery"),
        ("token='a, b, c' then", "b, c"),
        ('{"client_secret": "with \\" quote, and space", "n": 1}', "quote, and"),
        ("DB_PASSWORD='p w' ./run", "p w"),
    ],
)
def test_a_quoted_value_is_redacted_whole(text: str, secret: str) -> None:
    out = redact(text)
    assert_gone(out, secret)
    assert REDACTED in out
    assert out.endswith(text[text.rindex(" ") :])  # what follows stays


@pytest.mark.parametrize(
    ("text", "kept", "secret"),
    [
        ("fetch https://alice:s3cret@example.com/repo.git", "alice:", "s3cret"),
        ("postgres://app:hunter2@db:5432/x failed", "postgres://app:", "hunter2"),
    ],
)
def test_urls_lose_their_password_and_keep_the_host(
    text: str, kept: str, secret: str
) -> None:
    out = redact(text)
    assert_gone(out, secret)
    assert kept in out
    assert "@" in out


@pytest.mark.parametrize(
    "secret",
    [
        "ASIAIOSFODNN7EXAMPLE",  # AWS temporary (STS) access key id
        "glpat-abcdefghij0123456789",  # GitLab
        "ya29.a0AfH6SMBabcdefghijklmnopqrstuv",  # Google OAuth access token
        "xoxp-1234567890-abcdefghij",  # Slack user token
        "npm_abcdefghijklmnopqrstuvwxyz0123456789",  # npm
    ],
)
def test_more_token_shapes_are_redacted_anywhere(secret: str) -> None:
    assert redact(f"got {secret} here") == f"got {REDACTED} here"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("aws_session_token=FQoGZXIvYXdzEJr//////////wEaDH", "FQoGZXIvYXdz"),
        ("AWS_SECRET_ACCESS_KEY: wJalrXUtnFEMI/K7MDENG", "wJalrXUtnFEMI"),
        (
            "Endpoint=sb://x.net/;AccountName=a;AccountKey=abc+def/ghi==;Suffix=c",
            "abc+def",
        ),
        ("https://a.blob.core.windows.net/c?sv=2&sig=abcDEF123%2Bxyz&se=1", "abcDEF"),
    ],
)
def test_cloud_credentials_in_their_usual_forms(text: str, secret: str) -> None:
    out = redact(text)
    assert_gone(out, secret)
    assert REDACTED in out


def test_redaction_of_a_long_error_stays_fast() -> None:
    # It runs on every error path: 64 KiB of ordinary text, one secret inside.
    import time

    text = ("error: the build failed at step 12, retry later; " * 1300) + (
        "token=abcdef123456"
    )
    start = time.perf_counter()
    out = redact(text)
    assert time.perf_counter() - start < 0.5
    assert_gone(out, "abcdef123456")


def test_secrets_inside_json_text_are_redacted() -> None:
    # A JSON log line on stderr, or a frame preview, escapes the quotes: the
    # quoted value "correct horse battery" was kept whole there.
    from tests.secret_corpus import SAID, leaked

    line = json.dumps({"level": "error", "msg": SAID})
    out = redact(line)
    assert not leaked(out), out
    assert not leaked(redact(json.dumps(line)))  # escaped twice
    assert json.loads(out)["level"] == "error"  # still JSON
    escaped = redact(json.dumps(json.dumps({"password": "a b"})))
    assert '\\"password\\": \\"[REDACTED]\\"' in escaped


@pytest.mark.parametrize(
    "secret",
    [
        "sk_live_4eC39HqLyjWDarjtT1zdp7dc",  # Stripe secret key
        "rk_test_51H8abcdefghijklmnopqrst",  # Stripe restricted key
        "GOCSPX-AbCdEfGhIjKlMnOpQrStUvWx",  # Google OAuth client secret
        "xapp-1-A0123BCDEF-1234567890-abcdef",  # Slack app-level token
    ],
)
def test_stripe_google_oauth_and_slack_app_tokens(secret: str) -> None:
    assert redact(f"using {secret} now") == f"using {REDACTED} now"


#: Text that made a pattern backtrack: each was 5-45 s at 50-260 KB, and grew
#: with the square of the size (an agent's error can be 64 MiB). At 400 KB a
#: linear redaction takes well under a second; a quadratic one, hours.
BACKTRACKERS = {
    "one long word full of a secret name": "token" * 80_000,
    "secret names between dots": "token.." * 57_000,
    "short words that start like a name": "sk-" * 130_000,
    "dots a URL scheme could span": "eyJaaaaaaaaa." * 30_000,
    "base64 lines no END line follows": "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY\n" * 24_000,
    "base64 lines, then not base64, then END": "QUJDREVG\n" * 40_000
    + "not base64\n-----END PRIVATE KEY-----\n",
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("text", BACKTRACKERS.values(), ids=BACKTRACKERS.keys())
def test_redaction_is_linear_on_text_built_to_backtrack(text: str) -> None:
    out = redact(text)  # a quadratic pattern never returns: the timeout says so
    assert 0 < len(out) <= len(text)


def test_a_key_tail_is_redacted_up_to_the_first_line_that_is_not_base64() -> None:
    text = (
        "kept line\n" + "\n".join(PEM_BODY) + "\n-----END RSA PRIVATE KEY-----\nafter"
    )
    assert redact(text) == f"kept line\n{REDACTED}\nafter"
    # An END with no key lines before it is redacted alone.
    assert redact("x -----END PRIVATE KEY----- y") == f"x {REDACTED} y"


def test_authenticate_in_prose_is_not_a_secret_name() -> None:
    # "authenticate: the agent ..." (an ACP method named in an error) became
    # "authenticate: [REDACTED] agent ...", in every batch summary of a login
    # failure; the names around it that are secret keep their match.
    said = "authenticate: the agent refused the method"
    assert redact(said) == said
    assert redact("Authorization: xyz123") == "Authorization: [REDACTED]"
    assert redact("auth: xyz123") == "auth: [REDACTED]"
    assert redact("authentication_token=abc") == "authentication_token=[REDACTED]"
