import pytest
from wp_mcp.collectors.cpulist import CpuListError, format_cpulist, parse_cpulist, parse_cpumask


def test_ranges_singles_and_strides_expand_to_sorted_unique_cpus():
    assert parse_cpulist("0-3,8,10-14:2\n") == [0, 1, 2, 3, 8, 10, 12, 14]
    assert parse_cpulist("5,1,1-2") == [1, 2, 5]


def test_empty_list_is_a_node_without_cpus():
    assert parse_cpulist("") == []
    assert parse_cpulist("  \n") == []


def test_format_collapses_consecutive_runs():
    assert format_cpulist([8, 0, 1, 2, 3, 5]) == "0-3,5,8"
    assert format_cpulist([]) == ""


def test_format_then_parse_round_trips():
    cpus = [0, 2, 4, 5, 6, 7, 100, 101]
    assert parse_cpulist(format_cpulist(cpus)) == cpus


@pytest.mark.parametrize("bad", ["a-b", "3-1", "1-", "0-4:0"])
def test_invalid_text_names_the_bad_item(bad):
    with pytest.raises(CpuListError, match="invalid cpulist"):
        parse_cpulist(bad)


def test_hex_mask_with_comma_groups():
    assert parse_cpumask("00000000,0000000f\n") == [0, 1, 2, 3]
    assert parse_cpumask("1,00000000") == [32]
