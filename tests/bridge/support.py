"""Helpers for the bridge tests: real children, a recording backend, input shapes."""

from __future__ import annotations

import sys

from oma_bridge import InputProfile, ProcessBackendConfig
from oma_bridge.testing import ScriptedBackend

#: Bound on every wait for a child; generous, and never asserted.
WAIT = 30

TEXT_ONLY_ERROR = (
    "The process external backend accepts string prompts only; structured "
    "messages or content blocks cannot be forwarded without loss."
)
REWRITE_ONLY_ERROR = (
    "The process external backend accepts before_run.prompt rewrites only; "
    "before_run.messages cannot be forwarded without loss."
)

PNG_B64 = "iVBORw0KGgo="  # the PNG signature, canonical base64


def text(value):
    return {"type": "text", "text": value}


def image(data=PNG_B64, media_type="image/png"):
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": media_type, "data": data},
    }


def image_url(url):
    return {"type": "image", "source": {"type": "url", "url": url}}


def user(*blocks):
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks):
    return {"role": "assistant", "content": list(blocks)}


def echo_config(**kwargs):
    """A child that writes back exactly what it read on stdin."""
    script = "import sys; sys.stdout.write(sys.stdin.read())"
    return ProcessBackendConfig(
        command=sys.executable, args=("-c", script), timeout=WAIT, **kwargs
    )


def marker_config(marker, *, input="stdin"):
    """A child that creates ``marker`` as its first act, then echoes stdin."""
    return ProcessBackendConfig(
        command="sh",
        args=("-c", 'touch "$0"; cat', str(marker)),
        input=input,
        timeout=WAIT,
    )


#: What ``recording_backend`` admits by default: structured input, any block.
STRUCTURED = InputProfile(transport="custom", structured=True)


def recording_backend(reply="ok", *, during=None, input_profile=STRUCTURED):
    """A custom backend that records each request and replies ``reply``;
    ``during`` is called with the request while the run is in flight (to
    mutate things)."""

    def turn(request):
        if during is not None:
            during(request)
        return reply

    return ScriptedBackend(turn, input_profile=input_profile)
