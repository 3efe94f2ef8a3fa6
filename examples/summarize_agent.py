"""An offline demo agent: an extractive summary of the document it is given.

Protocol (kept deliberately simple, so any process backend mode works):

* The document is read from stdin (``input="stdin"``). If words are given on the
  command line after the options (``input="argument"``), they are the document
  instead and stdin is not read.
* ``-n N`` / ``--sentences N`` sets how many sentences the summary keeps
  (default 3). ``--delay S`` pauses S seconds before each output line, to
  make streaming easy to watch (default 0). ``--`` ends the options.
* If the first line of the input starts with "Summarize" or "Summarise" (any
  case), it is an instruction, not part of the document: a number in it, as in
  "Summarize in 2 sentences", sets N (it wins over ``-n``). This is how an
  ``AgentConfig.system_prompt`` reaches the agent: the process backend sends the
  system prompt, a blank line, then the user text.
* If the document's first line is short and has no final full stop, it is the
  document's title; otherwise a title is made from the top keywords.

Output, one line at a time (each flushed, so a caller sees it stream)::

    Title: <title>
    Summary (N of M sentences):
    - <sentence>            (in document order)
    Keywords: <k1>, <k2>, ...
    Stats: <words> words, <sentences> sentences, <paragraphs> paragraphs,
           about <m> min read

Sentences are scored by TF-IDF over the document's sentences (stopwords dropped,
light plural folding; words of the title count more), damped for sentence
length, with a bonus for the opening sentence of the document and of each
paragraph and a penalty for very short sentences; near-duplicates of an already
chosen sentence are skipped.

Exit status: 0 on success; 2, with a message on stderr, when there is no
document (empty or whitespace-only input); 64 for a bad option; 1 when stdout is
closed before the summary is written. Standard library only, Python 3.10+.
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass

DEFAULT_SENTENCES = 3
WORDS_PER_MINUTE = 230
KEYWORD_COUNT = 6
TITLE_BOOST = 1.5

STOPWORDS = frozenset(
    """
    a about above after again against all almost also although always am among an
    and another any anyone anything are aren't around as at be became because
    become been before being below between both but by can cannot can't could
    couldn't did didn't do does doesn't doing don't done down during each either
    else enough etc even ever every few first for from further get gets getting
    given gives go goes going got had hadn't has hasn't have haven't having he
    her here hers herself him himself his how however i if in into is isn't it
    it's its itself just last least less let like likely made make makes many
    may me might more most much must my myself neither never new no nor not
    nothing now of off often on once one only onto or other others otherwise our
    ours ourselves out over own per perhaps put quite rather really same say says
    see seen several shall she should shouldn't since so some something still
    such than that that's the their theirs them themselves then there there's
    these they they're thing things this those though through thus to too toward
    two under until up upon us use used uses using usually very via was wasn't
    way we well were weren't what what's when where whether which while who
    whole whom whose why will with within without won't would wouldn't yet you
    your yours yourself yourselves
    """.split()
)

# Abbreviations whose full stop does not end a sentence.
ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.", "mr.", "mrs.", "dr.", "fig.")

INSTRUCTION = re.compile(r"^\s*summari[sz]e\b", re.IGNORECASE)
NUMBER = re.compile(r"\b(\d{1,3})\b")
# \u2018 \u2019 \u201c \u201d are the typographic single and double quotes.
WORD = re.compile(r"[A-Za-z][A-Za-z0-9'\u2019-]*")
SENTENCE_END = re.compile(
    r"(?:(?<=[.!?])|(?<=[.!?][\"')\]\u2019\u201d]))"  # after an end mark (and quote)
    r"\s+(?=[\"'(\[\u201c\u2018]?[A-Z0-9])"  # before a capital or digit
)
APOSTROPHES = "'\u2019"


class UsageError(Exception):
    """A bad command line."""


@dataclass
class Sentence:
    text: str
    index: int  # position in the document
    paragraph: int
    opens_paragraph: bool
    terms: list[str]  # normalised content words, with repeats
    word_count: int


def fold(word: str) -> str:
    """Lower-case and fold simple plurals so "pipes" and "pipe" count together."""
    word = word.lower().replace("\u2019", "'")
    if word.endswith("'s"):
        word = word[:-2]
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def content_terms(text: str) -> list[str]:
    terms = []
    for match in WORD.finditer(text):
        raw = match.group().strip(APOSTROPHES + "-")
        if len(raw) < 3 or raw.lower().replace("\u2019", "'") in STOPWORDS:
            continue
        terms.append(fold(raw))
    return terms


def split_sentences(paragraph: str) -> list[str]:
    text = " ".join(paragraph.split())
    # Hide the full stops of known abbreviations from the splitter.
    for abbr in ABBREVIATIONS:
        pattern = r"\b" + re.escape(abbr)
        text = re.sub(pattern, abbr.replace(".", "\0"), text, flags=re.IGNORECASE)
    return [s.replace("\0", ".").strip() for s in SENTENCE_END.split(text) if s.strip()]


def parse_args(argv: list[str]) -> tuple[int, float, str | None]:
    """Return (sentences, delay, document from argv or None)."""
    count = DEFAULT_SENTENCES
    delay = 0.0
    rest = list(argv)
    while rest:
        if rest[0] == "--":
            rest.pop(0)
            break
        if rest[0] in ("-n", "--sentences"):
            if len(rest) < 2 or not rest[1].isdigit() or int(rest[1]) < 1:
                raise UsageError(f"{rest[0]} needs a positive whole number")
            count = int(rest[1])
            del rest[:2]
        elif rest[0] == "--delay":
            try:
                delay = float(rest[1]) if len(rest) > 1 else -1.0
            except ValueError:
                delay = -1.0
            if not 0 <= delay <= 10:
                raise UsageError("--delay needs a number of seconds from 0 to 10")
            del rest[:2]
        elif rest[0] in ("-h", "--help"):
            raise UsageError(__doc__ or "")
        else:
            break
    return count, delay, (" ".join(rest) if rest else None)


def split_instruction(text: str, count: int) -> tuple[str, int]:
    """Remove a leading "Summarize ..." line; a number in it sets the count."""
    first, _, rest = text.lstrip().partition("\n")
    if not INSTRUCTION.match(first):
        return text, count
    number = NUMBER.search(first)
    if number and int(number.group(1)) > 0:
        count = int(number.group(1))
    return rest, count


def split_title(text: str) -> tuple[str | None, str]:
    first, _, rest = text.strip().partition("\n")
    first = first.strip().lstrip("#").strip()
    looks_like_title = (
        rest.strip()
        and 0 < len(first.split()) <= 12
        and not first.endswith((".", "?", "!", ":", ","))
    )
    if looks_like_title:
        return first, rest
    return None, text


def build_sentences(body: str) -> tuple[list[Sentence], int]:
    paragraphs = [p for p in re.split(r"\n\s*\n", body) if p.strip()]
    sentences: list[Sentence] = []
    for p_index, paragraph in enumerate(paragraphs):
        for s_index, text in enumerate(split_sentences(paragraph)):
            sentences.append(
                Sentence(
                    text=text,
                    index=len(sentences),
                    paragraph=p_index,
                    opens_paragraph=s_index == 0,
                    terms=content_terms(text),
                    word_count=len(WORD.findall(text)),
                )
            )
    return sentences, len(paragraphs)


def term_weights(sentences: list[Sentence]) -> dict[str, float]:
    """TF-IDF of each term: its count, times the log of how rare it is per sentence.

    Frequent topic words ("pipe" in an article about pipes) keep a high weight
    from their count; words in nearly every sentence are damped by the IDF.
    """
    tf: Counter[str] = Counter()
    df: Counter[str] = Counter()
    for sentence in sentences:
        tf.update(sentence.terms)
        df.update(set(sentence.terms))
    n = len(sentences)
    return {term: count * math.log(1 + n / df[term]) for term, count in tf.items()}


def score(sentence: Sentence, weights: dict[str, float]) -> float:
    unique = set(sentence.terms)
    if not unique:
        return 0.0
    value = sum(weights[t] for t in unique) / len(unique) ** 0.4
    if sentence.index == 0:
        value *= 1.35
    elif sentence.opens_paragraph:
        value *= 1.15
    if sentence.word_count < 6:
        value *= 0.5
    elif sentence.word_count > 45:
        value *= 0.8
    return value


def choose(
    sentences: list[Sentence], weights: dict[str, float], count: int
) -> list[Sentence]:
    ranked = sorted(sentences, key=lambda s: (-score(s, weights), s.index))
    chosen: list[Sentence] = []
    for candidate in ranked:
        if len(chosen) == count:
            break
        terms = set(candidate.terms)
        if any(_jaccard(terms, set(c.terms)) > 0.5 for c in chosen):
            continue  # says again what a chosen sentence already says
        chosen.append(candidate)
    return sorted(chosen, key=lambda s: s.index)


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


def keywords(body: str, weights: dict[str, float], limit: int) -> list[str]:
    """The heaviest terms, each shown in its most frequent written form."""
    forms: dict[str, Counter[str]] = {}
    for match in WORD.finditer(body):
        raw = match.group().strip(APOSTROPHES + "-")
        if len(raw) >= 3 and raw.lower() not in STOPWORDS:
            forms.setdefault(fold(raw), Counter())[raw.lower()] += 1
    ranked = sorted(weights, key=lambda t: (-weights[t], t))
    return [forms[t].most_common(1)[0][0] for t in ranked[:limit] if t in forms]


def reading_time(words: int) -> str:
    minutes = words / WORDS_PER_MINUTE
    return "under 1 min read" if minutes < 1 else f"about {round(minutes)} min read"


def emit(line: str, delay: float = 0.0) -> None:
    if delay:
        time.sleep(delay)
    print(line, flush=True)


def main(argv: list[str]) -> int:
    try:
        count, delay, from_args = parse_args(argv)
    except UsageError as exc:
        print(f"summarize_agent: {exc}", file=sys.stderr)
        return 64
    if from_args is not None:
        text = from_args
    else:
        text = sys.stdin.buffer.read().decode("utf-8", "replace")
    text = text.replace("\r\n", "\n")
    body, count = split_instruction(text, count)
    if not body.strip():
        print(
            "summarize_agent: no document to summarize; pass the text on stdin "
            "(optionally after a first line such as 'Summarize in 3 sentences')",
            file=sys.stderr,
        )
        return 2

    title, body = split_title(body)
    sentences, paragraph_count = build_sentences(body)
    weights = term_weights(sentences)
    for term in set(content_terms(title or "")) & weights.keys():
        weights[term] *= TITLE_BOOST  # the title names the topic
    top = keywords(body, weights, KEYWORD_COUNT)
    chosen = choose(sentences, weights, count)
    words = len(WORD.findall(body)) + (len(WORD.findall(title)) if title else 0)

    title = title or " / ".join(w.capitalize() for w in top[:3]) or "Untitled"
    emit(f"Title: {title}", delay)
    emit(f"Summary ({len(chosen)} of {len(sentences)} sentences):", delay)
    for sentence in chosen:
        emit(f"- {sentence.text}", delay)
    emit(f"Keywords: {', '.join(top) if top else '(none)'}", delay)
    plural = "s" if paragraph_count != 1 else ""
    emit(
        f"Stats: {words} words, {len(sentences)} sentences, "
        f"{paragraph_count} paragraph{plural}, {reading_time(words)}",
        delay,
    )
    return 0


if __name__ == "__main__":
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="replace")
    try:
        status = main(sys.argv[1:])
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly, without a traceback
        # and without a second error when Python flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 1
    sys.exit(status)
