"""An offline demo reviewer: checks the text it is given for length and repetition.

It reads its prompt on stdin. When the prompt carries the outputs of earlier
tasks (the "## id: title" sections oma-bridge puts before a task's description),
those are what it reviews; otherwise it reviews the whole prompt. It prints a
few findings, one per line. Standard library only.
"""

from __future__ import annotations

import re
import sys
from collections import Counter

prompt = sys.stdin.read()
sections = re.split(r"^## .*$", prompt, flags=re.MULTILINE)
text = "\n".join(sections[1:]) if len(sections) > 1 else prompt
words = re.findall(r"[A-Za-z']+", text.lower())
if not words:
    sys.exit("team_critic: nothing to review")
common = [
    word
    for word, count in Counter(w for w in words if len(w) > 4).most_common(3)
    if count > 1
]
print(f"Review: {len(words)} words.")
print("Length: fine." if len(words) < 150 else "Length: too long, cut it down.")
if common:
    print("Repeated words: " + ", ".join(common) + ".")
else:
    print("Repeated words: none.")
