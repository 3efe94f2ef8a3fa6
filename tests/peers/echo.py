"""Echo agent: read the prompt from stdin, answer "echo: <prompt>"."""

import sys

prompt = sys.stdin.read()
sys.stdout.write(f"echo: {prompt}")
