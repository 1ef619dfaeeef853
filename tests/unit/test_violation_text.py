"""How ids and texts are written into a violation's detail and onto the one-line messages: by a
fixed list of code points, never by a Unicode database, so that both engines and every Python write
the same letters (``reconstructor.core.violations``; the JVM engine's port is ``Text.pyRepr``)."""

from __future__ import annotations

import ast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconstructor.core.violations import printable, quoted


def _escaped(code: int) -> bool:
    """The contract's rule: C0 and C1 controls, the two Unicode line ends, surrogates."""
    return code < 0x20 or 0x7F <= code <= 0x9F or code in (0x2028, 0x2029) or 0xD800 <= code <= 0xDFFF


# Any code point, lone surrogates included: a text the rule must handle even where the pipeline
# never lets one through.
ALL_OF_UNICODE = st.text(st.integers(0, 0x10FFFF).map(chr), max_size=12)

SAMPLES = [
    ("\U0001fae0", "\U0001fae0"),  # MELTING FACE, Unicode 14: past Java 17's tables
    ("\U0001fa89", "\U0001fa89"),  # Unicode 15: past Python 3.11's
    ("\u0378", "\u0378"),  # unassigned
    ("\U000e0080", "\U000e0080"),  # unassigned, plane 14
    ("\U0010ffff", "\U0010ffff"),  # a noncharacter, the last code point
    ("\ue000", "\ue000"),  # private use
    ("\u200b", "\u200b"),  # ZERO WIDTH SPACE, a format character
    ("\ufeff", "\ufeff"),
    ("\u00ad", "\u00ad"),  # SOFT HYPHEN
    ("\u00a0", "\u00a0"),  # NO-BREAK SPACE
    ("\u3000", "\u3000"),
    ("\U000e0001", "\U000e0001"),  # LANGUAGE TAG
    ("é", "é"),
    ("\n", "\\n"), ("\t", "\\t"), ("\r", "\\r"),
    ("\x00", "\\x00"), ("\x1b", "\\x1b"), ("\x1f", "\\x1f"), ("\x7f", "\\x7f"),
    ("\x80", "\\x80"), ("\x85", "\\x85"), ("\x9f", "\\x9f"),
    ("\u2028", "\\u2028"), ("\u2029", "\\u2029"),
    ("\ud800", "\\ud800"), ("\udfff", "\\udfff"),
]


@pytest.mark.parametrize(("text", "written"), SAMPLES, ids=[f"U+{ord(t):04X}" for t, _ in SAMPLES])
def test_a_letter_is_escaped_only_when_it_is_a_control_a_line_end_or_a_surrogate(text, written):
    assert printable(text) == written
    assert printable(f"a{text}b") == f"a{written}b"
    assert quoted(text) == f"'{written}'"
    assert quoted(f"a{text}b") == f"'a{written}b'"


def test_quoting_keeps_the_shape_of_pythons_repr():
    assert quoted("a'b") == '"a\'b"'
    assert quoted("a\"b") == "'a\"b'"
    assert quoted("a'b\"c") == "'a\\'b\"c'"
    assert quoted("a\\b") == "'a\\\\b'"
    assert quoted("") == "''"
    assert quoted(None) == "None"
    assert printable("a\\b'\"") == "a\\b'\""  # the line escapes letters, not quotes or backslashes


@given(ALL_OF_UNICODE)
def test_every_code_point_is_kept_or_escaped_by_the_rule_alone(text):
    for c in text:
        assert (printable(c) != c) == _escaped(ord(c))
    line = printable(text)
    assert len(line.splitlines()) <= 1  # one line for every reader that splits on Unicode's line ends
    assert not any(_escaped(ord(c)) for c in line)
    line.encode("utf-8")  # no lone surrogate left: the line is UTF-8 (raises otherwise)


@given(ALL_OF_UNICODE)
def test_a_quoted_text_reads_back_as_a_python_literal(text):
    written = quoted(text)
    assert ast.literal_eval(written) == text
    assert not any(_escaped(ord(c)) for c in written)
    if text.isprintable():
        assert written == repr(text)  # where no Unicode table is involved, Python's repr
