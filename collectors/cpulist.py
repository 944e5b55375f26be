"""Kernel cpulist syntax; lives in wp_mcp.graph.cpulist so every stage shares one copy."""

from wp_mcp.graph.cpulist import CpuListError, format_cpulist, parse_cpulist, parse_cpumask

__all__ = ["CpuListError", "format_cpulist", "parse_cpulist", "parse_cpumask"]
