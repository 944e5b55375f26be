"""Markers for the skills tests (the live ones start real workloads as root)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: starts a real workload (seconds)")
    config.addinivalue_line("markers", "root: needs root (network namespaces)")
