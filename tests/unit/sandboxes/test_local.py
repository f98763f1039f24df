"""Local sandboxes: the conformance suite plus what only a bubblewrap sandbox promises."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.config import Settings
from hangar.errors import InvalidInput, InvalidSettings, SandboxCapabilityMissing
from hangar.errors import SandboxNotFound, SandboxUnavailable
from hangar.sandboxes import HOME, SandboxCapabilities, SandboxSpec, SandboxUser
from hangar.sandboxes.local import layout
from hangar.sandboxes import open_sandboxes, refuse_missing
from hangar.sandboxes.local import HARNESS_MOUNT, LocalSandboxes
from hangar.testing.sandboxes import SandboxesConformance, run
from tests.unit.sandboxes.test_disk import until_no_loop_device_under

pytestmark = pytest.mark.sandbox


@pytest.fixture(autouse=True)
def _bubblewrap_is_installed() -> None:
    if shutil.which("bwrap") is None:
        pytest.fail(
            "bubblewrap (bwrap) is not installed: local sandbox tests need it "
            "(run `make install` or `apt-get install bubblewrap`)",
            pytrace=False,
        )


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data folder like ~/.hangar: secrets beside the sandboxes root."""
    data = tmp_path / "data"
    (data / "sandboxes").mkdir(parents=True)
    (data / "vault.key").write_bytes(os.urandom(32))
    (data / "hangar.db").write_bytes(b"SQLite format 3\0")
    (data / "admin-token").write_text("token")
    return data


@pytest.fixture
def harness_dir(tmp_path: Path) -> Path:
    harnesses = tmp_path / "harnesses"
    for folder, name in (("bin", "hello-harness"), ("node_modules/.bin", "hello-node")):
        (harnesses / folder).mkdir(parents=True)
        (harnesses / folder / name).write_text(f"#!/bin/sh\necho {name} $1\n")
        (harnesses / folder / name).chmod(0o755)
    return harnesses


@pytest.fixture
def sandboxes_settings(data_dir: Path, harness_dir: Path) -> Settings:
    """Settings that open the very backend of ``sandboxes`` (the suite opens it afresh)."""
    return Settings.build(data_dir=data_dir, harness_dir=harness_dir)


@pytest.fixture
def sandboxes(sandboxes_settings: Settings) -> Iterator[LocalSandboxes]:
    data_dir = sandboxes_settings.data_dir
    backend = LocalSandboxes.from_url(sandboxes_settings.sandboxes, sandboxes_settings)
    assert backend.root == data_dir / "sandboxes"
    yield backend
    for info in LocalSandboxes(data_dir / "sandboxes").list():
        backend.destroy(info.id)
    # Nothing is left but the disk template, and no loop device holds a sandbox's disk.
    left = [p.name for p in (data_dir / "sandboxes").iterdir() if not p.name.startswith(".disk-")]
    assert left == []
    until_no_loop_device_under(data_dir)


class TestLocalSandboxes(SandboxesConformance):
    """The shared contract, against bubblewrap."""


def _host_pids_running(argv: list[str]) -> list[int]:
    wanted = b"\0".join(a.encode() for a in argv) + b"\0"
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and Path(f"/proc/{entry}/cmdline").read_bytes() == wanted:
                found.append(int(entry))
        except OSError:
            continue
    return found


def _record(data_dir: Path, sandbox_id: str) -> dict[str, object]:
    record = json.loads((data_dir / "sandboxes" / sandbox_id / "record.json").read_text())
    assert isinstance(record, dict)
    return record


def test_destroy_ends_every_process_in_the_sandbox(sandboxes: LocalSandboxes) -> None:
    info = sandboxes.create(SandboxSpec())
    seconds = f"300.{uuid.uuid4().int % 10**6:06d}"
    run(sandboxes, info.id, f"sleep {seconds} </dev/null >/dev/null 2>&1 &")
    [pid] = _host_pids_running(["sleep", seconds])
    sandboxes.destroy(info.id)
    assert not os.path.exists(f"/proc/{pid}")


def test_the_data_folder_and_host_homes_are_invisible_inside(
    sandboxes: LocalSandboxes, data_dir: Path
) -> None:
    marker = Path.home() / f".hangar-test-marker-{uuid.uuid4().hex}"
    marker.write_text("host home")
    try:
        info = sandboxes.create(SandboxSpec())
        other = sandboxes.create(SandboxSpec())
        hidden = [
            data_dir,
            data_dir / "vault.key",
            data_dir / "hangar.db",
            data_dir / "sandboxes" / other.id,
            f"{HOME}/{marker.name}",
            f"{HOME}/.bashrc",
            "/home",
        ]
        for path in hidden:
            assert not sandboxes.exec(info.id, ["test", "-e", str(path)]).ok, path
        assert run(sandboxes, info.id, f"ls -A {HOME}") == ""
    finally:
        marker.unlink()


def test_every_exec_runs_without_capabilities(sandboxes: LocalSandboxes) -> None:
    info = sandboxes.create(SandboxSpec())
    status = run(sandboxes, info.id, "sh -c 'cat /proc/self/status'")
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[cap], 16) == 0, (cap, fields[cap])
    assert fields["NoNewPrivs"].strip() == "1"


def test_system_folders_are_read_only(sandboxes: LocalSandboxes) -> None:
    info = sandboxes.create(SandboxSpec())
    name = f"hangar-test-{uuid.uuid4().hex}"
    for folder in ("/usr", "/usr/bin", "/etc", "/opt"):
        assert not sandboxes.exec(info.id, ["touch", f"{folder}/{name}"]).ok, folder
        assert not os.path.exists(f"{folder}/{name}")
    assert run(sandboxes, info.id, "readlink /bin") == "usr/bin\n"


def test_etc_is_the_hosts_read_only_with_hangars_own_files_in_place_of_the_hosts(
    sandboxes: LocalSandboxes,
) -> None:
    info = sandboxes.create(SandboxSpec())
    listed = run(sandboxes, info.id, "ls -A /etc").split()
    assert sorted(listed) == sorted(set(os.listdir("/etc")) | set(layout.ETC_FILES))
    passwd = run(sandboxes, info.id, "cat /etc/passwd")
    assert passwd != Path("/etc/passwd").read_text() and ":1000:" in passwd
    assert "directory = *" in run(sandboxes, info.id, "cat /etc/gitconfig")
    for user in SandboxUser:
        for path in ("/etc/passwd", "/etc/hangar-test-new"):
            assert not sandboxes.exec(info.id, ["sh", "-c", f"echo x >> {path}"], user=user).ok


def test_etc_is_one_bind_unless_the_host_lacks_a_file_of_hangars(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ours = [f"/etc/{name}" for name in layout.ETC_FILES]
    one = layout.etc_args("/box/etc")
    assert one[:3] == ["--ro-bind", "/etc", "/etc"] and len(one) == 3 * (1 + len(ours))
    assert [one[i + 2] for i in range(3, len(one), 3)] == ours
    modes = {"/etc/resolv.conf": 0o120777}  # a link, as systemd-resolved leaves it
    monkeypatch.setattr(layout, "_lstat_mode",
                        lambda path: modes.get(path, 0o100644))  # fmt: skip
    each = layout.etc_args("/box/etc")
    assert each[:4] == ["--perms", "0755", "--dir", "/etc"]
    assert ["--ro-bind", "/etc", "/etc"] != each[4:7]
    assert each[-3:] == ["--ro-bind", "/box/etc/gitconfig", "/etc/gitconfig"]


def test_the_harness_folder_is_read_only_with_its_clis_on_path(
    sandboxes: LocalSandboxes,
) -> None:
    info = sandboxes.create(SandboxSpec())
    assert run(sandboxes, info.id, "hello-harness one") == "hello-harness one\n"
    assert run(sandboxes, info.id, "hello-node two") == "hello-node two\n"
    for user in SandboxUser:
        assert not sandboxes.exec(info.id, ["touch", f"{HARNESS_MOUNT}/bin/x"], user=user).ok
    # hangar's folder: the agent passes through it to the CLIs, and lists nothing in it.
    assert run(sandboxes, info.id, "stat -c %a /hangar").strip() == "711"
    assert not sandboxes.exec(info.id, ["ls", "/hangar"]).ok


def test_the_parents_of_a_ro_path_stay_as_open_as_on_the_host(
    sandboxes: LocalSandboxes, tmp_path: Path
) -> None:
    repo = tmp_path / "repos" / "demo"
    repo.mkdir(parents=True)
    info = sandboxes.create(SandboxSpec(ro_paths=[str(repo)]))
    for parent in (tmp_path, tmp_path / "repos"):  # bubblewrap would make them 0700
        assert run(sandboxes, info.id, f"stat -c %a {parent}").strip() == "755"


def test_local_sandboxes_declare_host_paths_and_ports_but_not_host_reads_or_images() -> None:
    assert LocalSandboxes.capabilities == SandboxCapabilities(ro_paths=True, host_ports=True,
                                                              host_reads=False, images=False)


def test_a_spec_asking_for_capabilities_a_backend_lacks_is_refused_naming_each() -> None:
    spec = SandboxSpec(ro_paths=["/srv/repo"], host_ports=[11434], image="team/agent:1")
    with pytest.raises(SandboxCapabilityMissing) as refused:
        refuse_missing(SandboxCapabilities(), spec, "test")
    assert refused.value.code == "sandbox_capability_missing" and refused.value.status == 400
    assert refused.value.data == {"capability": "ro_paths",
                                  "missing": ["ro_paths", "host_ports", "images"],
                                  "backend": "test"}  # fmt: skip
    assert "['/srv/repo']" in refused.value.message and "[11434]" in refused.value.message
    assert "team/agent:1" in refused.value.message
    refuse_missing(SandboxCapabilities(host_ports=True), SandboxSpec(host_ports=[1]), "test")
    refuse_missing(SandboxCapabilities(images=True), SandboxSpec(image="team/agent:1"), "test")
    refuse_missing(SandboxCapabilities(), SandboxSpec(labels={"a": "b"}), "test")


def test_ro_paths_that_would_show_the_sandboxes_are_refused(
    sandboxes: LocalSandboxes, data_dir: Path
) -> None:
    for path in (str(data_dir), str(data_dir / "sandboxes"), "/", "/tmp", "relative/path"):
        with pytest.raises(InvalidInput):
            sandboxes.create(SandboxSpec(ro_paths=[path]))


def test_a_missing_bwrap_raises_sandbox_unavailable(tmp_path: Path) -> None:
    backend = LocalSandboxes(tmp_path / "sandboxes", None, bwrap=str(tmp_path / "no-bwrap"))
    with pytest.raises(SandboxUnavailable, match=r"bubblewrap \(bwrap\) is not installed"):
        backend.create(SandboxSpec())
    assert not (tmp_path / "sandboxes").exists() or not any((tmp_path / "sandboxes").iterdir())


def test_a_sandbox_whose_init_died_is_cleaned_up(
    sandboxes: LocalSandboxes, data_dir: Path
) -> None:
    info = sandboxes.create(SandboxSpec())
    init_pid = _record(data_dir, info.id)["init_pid"]
    assert isinstance(init_pid, int)
    os.kill(init_pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while info.id in {i.id for i in sandboxes.list()}:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not (data_dir / "sandboxes" / info.id).exists()
    with pytest.raises(SandboxNotFound):
        sandboxes.get(info.id)


def test_processes_and_hostname_are_the_sandboxs_own(sandboxes: LocalSandboxes) -> None:
    one, two = sandboxes.create(SandboxSpec()), sandboxes.create(SandboxSpec())
    run(sandboxes, one.id, "sleep 301 </dev/null >/dev/null 2>&1 &")
    assert "sleep 301" not in run(sandboxes, two.id, "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
    assert run(sandboxes, two.id, "hostname") == f"{two.id}\n"


def test_host_environment_does_not_leak_into_exec(
    sandboxes: LocalSandboxes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANGAR_LEAK_CHECK", "secret")
    info = sandboxes.create(SandboxSpec())
    assert "HANGAR_LEAK_CHECK" not in run(sandboxes, info.id, "env")


def test_exec_does_not_wait_for_background_processes_holding_its_output(
    sandboxes: LocalSandboxes,
) -> None:
    info = sandboxes.create(SandboxSpec())
    started = time.monotonic()
    result = sandboxes.exec(info.id, ["sh", "-c", "echo started; sleep 300 &"])
    assert result.stdout == b"started\n"
    assert time.monotonic() - started < 10


def test_a_command_killed_by_a_signal_exits_128_plus_the_signal(
    sandboxes: LocalSandboxes,
) -> None:
    info = sandboxes.create(SandboxSpec())
    assert sandboxes.exec(info.id, ["sh", "-c", "kill -9 $$"]).exit_code == 128 + 9


def test_from_url_takes_the_root_from_the_url_and_the_harness_dir_from_settings(
    tmp_path: Path,
) -> None:
    settings = Settings.build(data_dir=tmp_path, harness_dir=tmp_path / "h")
    backend = open_sandboxes(f"local://{tmp_path}/boxes", settings)
    assert isinstance(backend, LocalSandboxes)
    assert (backend.root, backend.harness_dir) == (tmp_path / "boxes", tmp_path / "h")
    with pytest.raises(InvalidSettings):
        LocalSandboxes.from_url("local://host/relative", settings)
