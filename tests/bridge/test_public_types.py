"""Public value types mean what their documentation says."""

from __future__ import annotations

import re

import pytest

from oma_bridge import (
    AgentRefusal,
    AuthRequiredError,
    BackendExitError,
    BackendStartError,
    BackendTimeout,
    InvalidMessageError,
    OmaBridgeError,
    ProtocolError,
    RemoteError,
    RootRefusedError,
    TokenUsage,
    UnsupportedContentBlockError,
)
from oma_bridge.bridge import errors

SAMPLES: dict[str, OmaBridgeError] = {
    "OmaBridgeError": OmaBridgeError("x"),
    "InvalidMessageError": InvalidMessageError("bad", path=("input", 0)),
    "UnsupportedContentBlockError": UnsupportedContentBlockError(
        "image", backend="process"
    ),
    "BackendStartError": BackendStartError("nope", reason="not found"),
    "RootRefusedError": RootRefusedError("claude", sandbox="yes"),
    "BackendExitError": BackendExitError("cat", exit_code=1),
    "BackendTimeout": BackendTimeout("cat", timeout=1.0),
    "AgentRefusal": AgentRefusal("no"),
    "ProtocolError": ProtocolError("garbage", line_preview="{"),
    "RemoteError": RemoteError(
        "session/prompt", rpc_code=-32602, message="Invalid params", data={"a": 1}
    ),
    "AuthRequiredError": AuthRequiredError(
        "session/new",
        command="agent",
        rpc_code=-32000,
        message="Authentication required",
        auth_methods=[{"id": "key", "name": "API key"}],
        login_command="agent login",
    ),
}


def _documented_tree() -> dict[str, list[str]]:
    """Class name -> the attributes the errors module docstring lists for it."""
    tree: dict[str, list[str]] = {}
    for line in (errors.__doc__ or "").splitlines():
        found = re.match(r"[\s│]*(?:[├└]── )?([A-Z]\w+)\b(.*)$", line)
        if found and found.group(1) in SAMPLES:
            tree[found.group(1)] = re.findall(r"\.(\w+)", found.group(2))
    return tree


def test_the_docstring_tree_names_every_error_class() -> None:
    tree = _documented_tree()
    assert set(tree) == set(SAMPLES) == set(errors.__all__)
    assert tree["RemoteError"] == ["method", "rpc_code", "rpc_message", "data"]


@pytest.mark.parametrize(("name", "attributes"), sorted(_documented_tree().items()))
def test_each_error_has_the_attributes_its_docstring_lists(
    name: str, attributes: list[str]
) -> None:
    error = SAMPLES[name]
    assert type(error).__name__ == name
    missing = [a for a in attributes if not hasattr(error, a)]
    assert not missing, f"{name} lacks documented attributes {missing}"


def test_remote_error_carries_the_json_rpc_error_object() -> None:
    error = SAMPLES["RemoteError"]
    assert isinstance(error, RemoteError)
    assert (error.method, error.rpc_code, error.rpc_message, error.data) == (
        "session/prompt",
        -32602,
        "Invalid params",
        {"a": 1},
    )
    assert "-32602" in str(error) and "Invalid params" in str(error)
    assert '({"a":1})' in str(error)  # data without a text, as JSON


def test_remote_error_shows_what_its_data_says() -> None:
    error = RemoteError(
        "session/new",
        rpc_code=-32603,
        message="Internal error",
        data={"details": "Query closed before response received"},
    )
    assert str(error).endswith(
        "-32603: Internal error (Query closed before response received)"
    )
    assert "(" not in str(RemoteError("m", rpc_code=1, message="x", data=None))


def test_auth_required_is_a_remote_error_phrased_for_its_caller() -> None:
    error = SAMPLES["AuthRequiredError"]
    assert isinstance(error, AuthRequiredError) and isinstance(error, RemoteError)
    assert error.rpc_code == -32000 and error.auth_methods == (
        {"id": "key", "name": "API key"},
    )
    assert str(error) == (
        "session/new: the agent 'agent' requires a login (Authentication "
        "required). It advertises these auth methods: key (API key). Choose one "
        "with auth_method=ID, or log in with its own command first (`agent login`)."
    )
    assert "Choose one with --auth-method ID," in error.describe(
        option="--auth-method "
    )


def test_code_means_the_kind_of_failure_on_every_error() -> None:
    # One meaning per name: .code is the stable string, never a JSON-RPC number.
    codes = {name: error.code for name, error in SAMPLES.items()}
    assert all(isinstance(code, str) and code.isupper() for code in codes.values())
    assert codes["RemoteError"] == "REMOTE_ERROR"
    assert len(set(codes.values())) == len(codes)


def test_token_usage_adds_field_by_field() -> None:
    total = TokenUsage(1, 2, 0.5) + TokenUsage(10, 20)
    assert total == TokenUsage(input_tokens=11, output_tokens=22, cost=0.5)
    assert TokenUsage(1, 2) + TokenUsage(3, 4) == TokenUsage(4, 6, None)
    assert sum([TokenUsage(1, 1), TokenUsage(2, 2)], TokenUsage()) == TokenUsage(3, 3)


def test_unknown_token_counts_stay_unknown_and_add_as_nothing() -> None:
    # None is "the agent reported none": no made-up 0, by default or in sums.
    assert (TokenUsage().input_tokens, TokenUsage().output_tokens) == (None, None)
    assert TokenUsage() + TokenUsage() == TokenUsage(None, None)
    assert TokenUsage() + TokenUsage(3, 4) == TokenUsage(3, 4)
    assert TokenUsage(3, None) + TokenUsage(None, 4) == TokenUsage(3, 4)
    assert TokenUsage(5, None) + TokenUsage(2, None) == TokenUsage(7, None)
    # A stated 0 is a count: known, not unknown.
    assert TokenUsage(0, 0) + TokenUsage() == TokenUsage(0, 0)
    assert TokenUsage().total_tokens is None
    assert TokenUsage(3, None).total_tokens == 3
    assert TokenUsage(0, 0).total_tokens == 0
    big = 2**63 - 1
    assert TokenUsage(None, big) + TokenUsage(big, 5) == TokenUsage(big, big)
    assert TokenUsage(big, big).total_tokens == big  # saturating, as sums do


def test_token_usage_is_not_a_tuple() -> None:
    # `+` has one meaning: adding a tuple is an error, not a concatenation.
    assert not isinstance(TokenUsage(), tuple)
    with pytest.raises(TypeError):
        TokenUsage(1, 2) + (3, 4)  # type: ignore[operator]  # noqa: RUF005
    with pytest.raises(AttributeError):
        TokenUsage().input_tokens = 5  # type: ignore[misc]


def test_usage_sums_saturate_and_stay_strict_json() -> None:
    import json
    import sys

    big = 2**63 - 1
    total = TokenUsage(big, 1, 1e308) + TokenUsage(5, big, 1e308)
    assert total == TokenUsage(big, big, sys.float_info.max)
    json.dumps(vars(total), allow_nan=False)  # no Infinity in it
    assert TokenUsage(1, 2) + TokenUsage(3, 4, 0.5) == TokenUsage(4, 6, 0.5)
