"""Host strings are escaped and capped; numbers are unit-normalised."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from wp_mcp.converters.text import (
    _TRAILING_NUMBER,
    IdRanges,
    _split_number,
    compact,
    escape,
    fmt_bytes,
    fmt_count,
    fmt_ms,
    fmt_pct,
    fmt_per_node,
    id_ranges,
    name_pattern,
    quote,
    show_id,
)


def test_escape_neutralises_line_breaks_ansi_nul_and_quotes():
    hostile = 'a\nb\rc\x00d\x1b[31me\u2028f\u2029g\x85h"i\\j\u202ek\x0bl\x0cm\x1cn'
    out = escape(hostile)
    assert len(out.splitlines()) == 1
    for char in "\n\r\x00\x1b\u2028\u2029\x85\u202e\x0b\x0c\x1c":
        assert char not in out
    assert '\\"' in out and "\\\\" in out and "\\n" in out and "\\x1b" in out


def test_a_huge_string_is_cut_before_escaping_and_says_how_much_was_dropped():
    name = "x" * 1_000_000
    out = quote(name)
    assert len(out) < 200
    assert out.endswith('…(+999880 chars)"')


def test_plain_ids_stay_bare_and_odd_ids_are_quoted():
    assert show_id("proc:1234") == "proc:1234"
    assert show_id("h2/proc:1234") == "h2/proc:1234"
    assert show_id("sock:tcp:[::1]:80") == "sock:tcp:[::1]:80"
    assert show_id("#wp fake header") == '"#wp fake header"'
    assert show_id("shm:posix:/a b\nc") == '"shm:posix:/a b\\nc"'


def test_numbers_are_unit_normalised():
    assert fmt_bytes(512) == "512B"
    assert fmt_bytes(1288490189) == "1.2G"
    assert fmt_bytes(1023.99 * 1024) == "1.0M"
    assert fmt_count(340_000) == "340K"
    assert fmt_count(51_559_359_609) == "52G"
    assert fmt_pct(3.44) == "3.4%"
    assert fmt_pct(312.4) == "312%"
    assert fmt_ms(12.2) == "12ms"
    assert fmt_ms(1500) == "1.5s"


def test_per_node_shares_are_largest_first_and_drop_noise():
    shares = {"0": 0.0823, "1": 0.0, "5": 0.0306, "6": 0.7747, "7": 0.071, "2": 0.0331}
    assert fmt_per_node(shares) == "{6:77%,0:8.2%,7:7.1%,2:3.3%,+1}"


def test_id_ranges_compress_runs():
    ids = [f"thr:{n}" for n in (100, 101, 102, 103, 150, 152)]
    assert id_ranges(ids) == "thr:100..103,150,152"
    many = [f"thr:{n}" for n in range(0, 40, 2)]
    assert id_ranges(many, limit=2) == "thr:0,2,+18 more"


# ids of a few prefixes, numbers in runs and gaps (leading zeros make two ids one number),
# and ids with no number at all
_ID = st.one_of(
    st.builds(
        "{}{}".format,
        st.sampled_from(["thr:", "proc:", "h1/proc:"]),
        st.sampled_from([*map(str, range(30)), "07", "010"]),
    ),
    st.sampled_from(["sock:a", "sock:b", "pipe:x", "pipe:y", "shm:z"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_ID, min_size=1, max_size=40, unique=True), st.integers(1, 5), st.data())
def test_a_group_member_shows_the_others_as_id_ranges_shows_them(ids, limit, data):
    member = data.draw(st.sampled_from(ids))
    others = [i for i in ids if i != member]
    assert IdRanges(ids).text(limit, without=member) == id_ranges(others, limit)


@settings(max_examples=500, deadline=None)
@given(
    st.text(st.sampled_from("ab:/\n7\u0663\u00b2\uff17"), max_size=8)
    | st.from_regex(r"[a-z/:]*\d*")
)
def test_an_id_splits_into_prefix_and_number_as_the_pattern_says(node_id):
    match = _TRAILING_NUMBER.match(node_id)
    expected = (match.group(1), int(match.group(2))) if match else None
    assert _split_number(node_id) == expected


def test_name_patterns_wildcard_numbers():
    assert name_pattern("ProcessPool-3_12") == "ProcessPool-*_*"


def test_compact_values_keep_structure_and_escape_strings():
    assert compact({"0": 0.25, "name": "a\nb"}) == '{0:0.25,name:"a\\nb"}'
    assert len(compact({"k": "x" * 10_000}, limit=100)) < 250
