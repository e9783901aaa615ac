"""Device slots (drover.backends.devices): specific ids per kernel, exclusive among live
kernels, named in CUDA_VISIBLE_DEVICES (or the slot's configured variable), recorded in
the kernel's runtime and kept across a restart; on the local and container backends."""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

import attrs
import pytest
from container_helpers import (
    IMAGE,
    Podman,
    container_flags,
)
from daemon_helpers import ends_on_word, running_daemon, wait_for

from drover import KernelStatus, SessionStatus
from drover.backends.base import AgentInfo
from drover.backends.devices import Devices
from drover.config import ConfigError, load_config
from drover.kinds.sessions.values import KernelInfo

S = SessionStatus
K = KernelStatus
IDS = ["dev-a", "dev-b", "dev-c"]
AGENT = [{"id": "test-agent", "cpu": 8, "mem": 4096, "gpu": IDS, "fpga": ["f0"]}]


async def _status(app, sid, *statuses):
    s = await app.repository.get_session(sid)
    return s if s.status in statuses else None


def _seen(kernel) -> str:
    return Path(kernel.runtime["stdout"]).read_text()


async def _said(*kernels) -> bool:
    return all(_seen(k) for k in kernels)


async def _refused(app, sid: str) -> bool:
    rows = await app.repository.history(sid)
    return rows[-1].error_code == "insufficient-resources" and "gpu=1" in rows[-1].message


async def _show(database, sid: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "drover", "--database", database.url, "show", sid,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "DROVER_DATABASE_SCHEMA": database.schema or ""},
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_local_kernels_get_exclusive_devices_kept_across_a_restart(database, tmp_path):
    """Three ids: two kernels asking gpu = 1 get two different ones and see them in
    CUDA_VISIBLE_DEVICES; after a restart of the daemon a third gets the last id; a
    fourth waits PENDING until one ends, then gets the freed id. The fpga slot's
    variable is configured (FPGA_IDS)."""
    flags = {"backend.agents": AGENT, "backend.device_variables": {"fpga": "FPGA_IDS"}}
    go = {name: tmp_path / name for name in ("one", "two", "three", "four")}

    def kernel(name: str, **more):
        before = 'echo "$CUDA_VISIBLE_DEVICES/${FPGA_IDS:-none}"'
        return {"command": ends_on_word(go[name], before=before), "cpu": 1, "mem": 64,
                "gpu": 1, **more}  # fmt: skip

    data = tmp_path / "data"
    async with running_daemon(database, data, **flags) as (app, _daemon):
        one, two = await app.repository.create_sessions(
            [{"kernels": [kernel("one", fpga=1)]}, {"kernels": [kernel("two")]}]
        )
        first = [
            (await wait_for(lambda s=s: _status(app, s, S.RUNNING), what="RUNNING")).kernels[0]
            for s in (one, two)
        ]
    held = [k.runtime["devices"] for k in first]
    assert held[0]["fpga"] == ["f0"]
    assert sorted(h["gpu"][0] for h in held) == ["dev-a", "dev-b"]
    await wait_for(lambda: _said(*first), what="their output")
    assert [_seen(k) for k in first] == [
        f"{held[0]['gpu'][0]}/f0\n",
        f"{held[1]['gpu'][0]}/none\n",
    ]
    # A new daemon: the devices held by the running kernels stay theirs.
    async with running_daemon(database, data, **flags) as (app, _daemon):
        (three,) = await app.repository.create_sessions([{"kernels": [kernel("three")]}])
        s3 = await wait_for(lambda: _status(app, three, S.RUNNING), what="RUNNING")
        assert s3.kernels[0].runtime["devices"] == {"gpu": ["dev-c"]}
        (four,) = await app.repository.create_sessions([{"kernels": [kernel("four")]}])
        await wait_for(lambda: _refused(app, four), what="four refused for want of a gpu")
        go["one"].touch()
        await wait_for(lambda: _status(app, one, S.TERMINATED), what="one ended")
        s4 = await wait_for(lambda: _status(app, four, S.RUNNING), what="four RUNNING")
        assert s4.kernels[0].runtime["devices"] == {"gpu": held[0]["gpu"]}
        await wait_for(lambda: _said(s4.kernels[0]), what="four's output")
        assert _seen(s4.kernels[0]) == f"{held[0]['gpu'][0]}/none\n"
        shown = await _show(database, four)
        assert f"gpu={held[0]['gpu'][0]}" in shown
        for name in ("two", "three", "four"):
            go[name].touch()
        for sid in (two, three, four):
            await wait_for(lambda sid=sid: _status(app, sid, S.TERMINATED), what="ended")


async def test_a_fraction_of_a_device_slot_is_refused_at_preparation(database, tmp_path):
    """gpu = 0.5 on a device slot: ERROR naming the problem, no process started."""
    async with running_daemon(database, tmp_path / "data", **{"backend.agents": AGENT}) as (
        app,
        _daemon,
    ):
        (sid,) = await app.repository.create_sessions(
            [{"kernels": [{"command": ["true"], "cpu": 1, "mem": 64, "gpu": 0.5}]}]
        )
        s = await wait_for(lambda: _status(app, sid, S.TERMINATED, S.ERROR), what="the end")
        (k,) = s.kernels
        assert (k.status, k.status_info) == (
            K.ERROR,
            "gpu = 0.5: a device slot is given whole devices; ask for a whole number",
        )


def test_device_ids_must_be_distinct(tmp_path):
    """A device list with a repeated id is a configuration error naming the slot."""
    path = tmp_path / "drover.toml"
    path.write_text('[[backend.agents]]\nid = "a"\ncpu = 1\nmem = 1\ngpu = ["0", "0"]\n')
    problem = r"agent 'a' gpu = \['0', '0'\] \(from file .*\): device ids must be distinct"
    with pytest.raises(ConfigError, match=problem):
        load_config(path, environ={})


async def test_container_kernels_get_exclusive_devices_in_their_variable(
    database, tmp_path: Path, podman: Podman, label_prefix: str
):
    """Two ids, three concurrent kernels asking gpu = 1: two run with different ids in
    CUDA_VISIBLE_DEVICES inside their containers; the third waits until one ends."""
    host = tmp_path / "host"
    flags = {
        **container_flags(podman, label_prefix, mount_roots=[str(host)]),
        "backend.agents": [{"id": "test-agent", "cpu": 4, "mem": 4096, "gpu": ["7", "9"]}],
    }
    host.mkdir()
    mount = [{"source": str(host), "target": "/host"}]

    def kernel(name: str):
        command = ends_on_word(Path(f"/host/{name}"), before="echo $CUDA_VISIBLE_DEVICES")
        return {"image": IMAGE, "command": command, "cpu": 0.5, "mem": 32, "gpu": 1,
                "mounts": mount}  # fmt: skip

    async with running_daemon(database, tmp_path / "data", **flags) as (app, _daemon):
        sids = await app.repository.create_sessions(
            [{"kernels": [kernel(n)]} for n in ("a", "b", "c")]
        )

        async def two_running():
            found = [await app.repository.get_session(s) for s in sids]
            running = [s for s in found if s.status == S.RUNNING]
            return found if len(running) == 2 else None

        found = await wait_for(two_running, timeout=60, what="two RUNNING")
        running = [s for s in found if s.status == S.RUNNING]
        (waiting,) = [s for s in found if s.status != S.RUNNING]
        assert waiting.status == S.PENDING
        ids = sorted(s.kernels[0].runtime["devices"]["gpu"][0] for s in running)
        assert ids == ["7", "9"]
        first = running[0]
        name = {sid: n for sid, n in zip(sids, "abc", strict=True)}
        (host / name[first.id]).touch()
        await wait_for(lambda: _status(app, first.id, S.TERMINATED), timeout=60, what="end")
        freed = first.kernels[0].runtime["devices"]["gpu"][0]
        assert Path(first.kernels[0].runtime["stdout"]).read_text() == f"{freed}\n"
        s = await wait_for(lambda: _status(app, waiting.id, S.RUNNING), timeout=60, what="run")
        assert s.kernels[0].runtime["devices"] == {"gpu": [freed]}
        for n in "abc":
            (host / n).touch()
        for sid in sids:
            s = await wait_for(lambda sid=sid: _status(app, sid, S.TERMINATED), timeout=60,
                               what="ended")  # fmt: skip
            (k,) = s.kernels
            assert Path(k.runtime["stdout"]).read_text() == f"{k.runtime['devices']['gpu'][0]}\n"


class _CommitDuringRead:
    """Kernel reports as the database answers them, with kernel ``a``'s report (its devices
    in its runtime) committing while ``b``'s device check reads the live kernels."""

    def __init__(self, devices: Devices, a: KernelInfo) -> None:
        self.devices = devices
        self.a = a
        self.reads = 0

    async def kernels_in(self, statuses):
        self.reads += 1
        if self.reads == 1:  # a's own check: nothing holds devices yet
            return []
        # b's check: the read's snapshot is taken, then a's report commits and its
        # backend releases the reservation, before the read returns.
        self.a = attrs.evolve(self.a, status=K.PREPARED, runtime={"devices": {"gpu": ["7"]}})
        self.devices.release(self.a.id)
        await asyncio.sleep(0)
        return []

    async def kernel_statuses(self, ids):
        return {i: self.a.status for i in ids if i == self.a.id}


async def test_a_report_committing_during_a_device_check_never_gives_its_ids_twice():
    """Kernel a is given gpu 7; its report commits (and its reservation is released) while
    b's check reads the live kernels: b must still get 9, not 7."""
    agent = AgentInfo("test-agent", {"cpu": 4, "gpu": 2}, {"gpu": ("7", "9")})
    devices = Devices([agent], {})

    def kernel(kid: str) -> KernelInfo:
        return KernelInfo(
            kid, f"s-{kid}", K.SCHEDULED, datetime.now(UTC), agent.id, {"cpu": 1, "gpu": 1}
        )

    a, b = kernel("a"), kernel("b")
    reporter = _CommitDuringRead(devices, a)
    assert await devices.assign(a, reporter) == {"gpu": ["7"]}
    assert await devices.assign(b, reporter) == {"gpu": ["9"]}
