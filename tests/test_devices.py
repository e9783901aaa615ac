"""Device slots (drover.backends.devices): specific ids per kernel, exclusive among live
kernels, named in CUDA_VISIBLE_DEVICES (or the slot's configured variable), recorded in
the kernel's runtime and kept across a restart; on the local and container backends."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from conftest import Database
from container_helpers import (
    IMAGE,
    Podman,
    container_flags,
)
from daemon_helpers import ends_on_word, running_daemon, wait_for

from drover import KernelStatus, SessionStatus
from drover.backends.base import AgentInfo
from drover.backends.devices import DeviceProblem, Devices
from drover.backends.fence import Fence, FencedError
from drover.config import ConfigError, load_config
from drover.model.values import Claim
from drover.testing import CoordinatorHarness

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


def _placed(status: KernelStatus = K.SCHEDULED, **spec) -> dict:
    return {"cpu": 1, "gpu": 1, "status": status, "agent_id": "test-agent", **spec}


async def test_devices_are_taken_in_the_database_one_taker_at_a_time(make_harness):
    """Eight kernels on one agent with four ids take their devices at the same moment
    (PostgreSQL: eight connections): four get one id each, all different, recorded in their
    runtime; the other four are refused naming the ids held. A kernel prepared again keeps
    its ids; one that ended gives them back; an id recorded by a RUNNING kernel (a restart)
    is never given; a kernel no longer being prepared takes nothing."""
    agent = AgentInfo("test-agent", {"cpu": 16, "gpu": 4}, {"gpu": ("0", "1", "2", "3")})
    devices = Devices([agent], {})
    async with make_harness(include_builtin_handlers=False) as h:
        repo = h.repository
        sids = await repo.seed_sessions(
            [{"status": S.SCHEDULED, "kernels": [_placed()]} for _ in range(8)]
        )
        kernels = [(await repo.get_session(sid)).kernels[0] for sid in sids]
        outcomes = await asyncio.gather(
            *(devices.assign(k, repo) for k in kernels), return_exceptions=True
        )
        given = [o["gpu"] for o in outcomes if isinstance(o, dict)]
        refused = [str(o) for o in outcomes if isinstance(o, DeviceProblem)]
        assert sorted(d for ids in given for d in ids) == ["0", "1", "2", "3"]
        assert refused == ["gpu: 1 device(s) wanted, 0 free on agent test-agent "
                           "(0, 1, 2, 3 held by other kernels)"] * 4  # fmt: skip
        # What every coordinator reads: the choice is in each holder's runtime.
        recorded = {k.id: (await repo.get_kernel(k.id)).runtime for k in kernels}
        pairs = list(zip(kernels, outcomes, strict=True))
        holders = [k for k, o in pairs if isinstance(o, dict)]
        assert [recorded[k.id]["devices"] for k, o in pairs if isinstance(o, dict)] == [
            o for _k, o in pairs if isinstance(o, dict)
        ]
        first, second = holders[:2]
        # Prepared again (a retry): it keeps its ids.
        again = await repo.get_kernel(first.id)
        assert await devices.assign(again, repo) == recorded[first.id]["devices"]
        # One that ended gives them back.
        assert await repo.report_kernel_status(second.id, K.ERROR)
        waiting = [k for k, o in pairs if not isinstance(o, dict)]
        assert await devices.assign(waiting[0], repo) == recorded[second.id]["devices"]
        # One no longer being prepared (sent back to PENDING) takes nothing.
        assert await repo.report_kernel_status(waiting[1].id, K.PENDING)
        with pytest.raises(DeviceProblem, match="no longer being prepared"):
            await devices.assign(waiting[1], repo)
        assert "devices" not in ((await repo.get_kernel(waiting[1].id)).runtime or {})


async def test_a_device_take_whose_claim_no_longer_holds_takes_nothing(pg: Database):
    """PostgreSQL (SQLite has one coordinator): a take under a tick's claim that is not on
    the session (lapsed, taken over) raises FencedError and records nothing."""
    agent = AgentInfo("test-agent", {"cpu": 16, "gpu": 2}, {"gpu": ("0", "1")})
    devices = Devices([agent], {})
    async with CoordinatorHarness(
        include_builtin_handlers=False, database_url=pg.url, database_schema=pg.schema
    ) as h:
        repo = h.repository
        (sid,) = await repo.seed_sessions([{"status": S.SCHEDULED, "kernels": [_placed()]}])
        (kernel,) = (await repo.get_session(sid)).kernels
        lost = Claim("coordinator-gone", "token-gone", repo.clock.time() + 10, ttl=10)
        with pytest.raises(FencedError, match="coordinator-gone"):
            await devices.assign(kernel, repo, Fence(sid, lost, repo))
        assert (await repo.get_kernel(kernel.id)).runtime is None
        assert await devices.assign(kernel, repo, Fence(sid, None, repo)) == {"gpu": ["0"]}
