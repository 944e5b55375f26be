"""The one writer of `--out` files: regular files only, 0600, one-line errors, no leftovers.

Each refusal is a reproduction from the hardening issue: as root, `--out /dev/null` once
turned the host's null device into a regular file. Here the device node is made with mknod
inside the test's own tmp dir.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from wp_mcp.graph import UserError, witty
from wp_mcp.graph.outfile import write_output
from wp_mcp.graph.store import Store
from wp_mcp.server.cli import main
from wp_testdata import WITTY_GRAPH


@pytest.fixture
def stored(store_dir) -> Store:
    store = Store(store_dir)
    store.put(witty.load_witty(WITTY_GRAPH), label="fixture")
    return store


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    """Exit code and stderr of one `wp-mcp` command run in this process."""
    code = main(list(argv))
    return code, capsys.readouterr().err


def assert_one_line_refusal(code: int, err: str, *words: str) -> None:
    assert code == 2
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("wp-mcp: error: ")
    for word in words:
        assert word in err


def leftovers(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.endswith(".tmp"))


def make_device_node(path: Path) -> None:
    try:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
    except PermissionError as exc:
        pytest.skip(f"cannot mknod here (needs CAP_MKNOD): {exc.strerror}")


def test_export_to_a_device_node_is_refused_and_the_node_stays(capsys, stored, tmp_path):
    node = tmp_path / "null"
    make_device_node(node)
    code, err = run_cli(capsys, "export", "latest", "--out", str(node))
    assert_one_line_refusal(code, err, "character device", "not a regular file")
    assert stat.S_ISCHR(os.lstat(node).st_mode)
    assert os.lstat(node).st_rdev == os.makedev(1, 3)
    assert leftovers(tmp_path) == []


def test_a_symlink_target_is_refused_and_what_it_points_to_is_unchanged(capsys, stored, tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    link = tmp_path / "graph.json"
    link.symlink_to(victim)
    for argv in (["export", "latest"], ["export", "latest", "--format", "witty"]):
        code, err = run_cli(capsys, *argv, "--out", str(link))
        assert_one_line_refusal(code, err, "symbolic link")
    assert link.is_symlink() and os.readlink(link) == str(victim)
    assert victim.read_bytes() == b"precious"
    assert leftovers(tmp_path) == []


def test_a_fifo_target_is_refused_without_opening_it(capsys, stored, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    # a reader is waiting, non-blocking: a writer that wrongly opened the FIFO would not
    # hang this test, and whatever it wrote would show up here
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        code, err = run_cli(capsys, "export", "latest", "--out", str(fifo))
        assert_one_line_refusal(code, err, "FIFO")
        assert os.read(reader, 1) == b""  # nothing came through
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_directory_target_gives_one_line_and_leaves_no_temp_file(capsys, stored, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    code, err = run_cli(capsys, "export", "latest", "--out", str(folder))
    assert_one_line_refusal(code, err, "directory")
    assert os.listdir(folder) == [] and leftovers(tmp_path) == []


def test_a_missing_folder_is_named(capsys, stored, tmp_path):
    code, err = run_cli(capsys, "export", "latest", "--out", str(tmp_path / "nope" / "g.json"))
    assert_one_line_refusal(code, err, "the folder", "does not exist")


def test_graphs_and_reports_are_created_0600_whatever_the_umask(capsys, stored, tmp_path):
    old_umask = os.umask(0)
    try:
        outputs = [tmp_path / name for name in ("g.json", "g.json.gz", "w.json", "r.md")]
        assert main(["export", "latest", "--out", str(outputs[0])]) == 0
        assert main(["export", "latest", "--out", str(outputs[1])]) == 0
        assert main(["export", "latest", "--format", "witty", "--out", str(outputs[2])]) == 0
        assert main(["skill", "run", "dataflow-topology-restore", "latest",
                     "--out", str(outputs[3])]) == 0  # fmt: skip
    finally:
        os.umask(old_umask)
    for path in outputs:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    assert outputs[3].read_text().startswith("#")
    assert leftovers(tmp_path) == []


def test_a_regular_file_is_replaced_whole(tmp_path):
    target = tmp_path / "report.md"
    target.write_bytes(b"old and longer than the new text")
    target.chmod(0o644)
    assert write_output(target, b"new") == target
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_refused_report_out_stores_nothing(capsys, stored, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    before = (len(stored.list()), len(stored.list_reports()))
    code, err = run_cli(capsys, "diagnose", "latest", "--out", str(folder))
    assert_one_line_refusal(code, err, "directory")
    code, err = run_cli(
        capsys, "skill", "run", "hotspot-thread-discovery", str(WITTY_GRAPH), "--out", str(folder)
    )
    assert_one_line_refusal(code, err, "directory")
    assert (len(stored.list()), len(stored.list_reports())) == before


def test_refused_collect_out_is_said_before_collecting(capsys, store_dir, tmp_path):
    code, err = run_cli(capsys, "collect", "--duration", "0", "--out", str(tmp_path))
    assert_one_line_refusal(code, err, "directory")
    assert len(Store(store_dir).list()) == 0


def test_a_full_disk_is_one_line_and_the_old_file_survives(small_disk):
    target = small_disk.root / "graph.json"
    target.write_bytes(b"the previous export")
    small_disk.fill()
    with pytest.raises(UserError, match=r"^cannot write .*graph\.json: no space left on device$"):
        write_output(target, b"x" * 1_000_000)
    assert target.read_bytes() == b"the previous export"
    assert leftovers(small_disk.root) == []


def test_a_read_only_file_system_is_one_line(small_disk):
    small_disk.make_read_only()
    with pytest.raises(UserError, match=r"^cannot write .*: read-only file system$"):
        write_output(small_disk.root / "graph.json", b"{}")
