"""Backend settings that make no sense are refused at start-up, in one line naming the key
(issue 36): every duration finite and within bounds, every name bounded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from drover.app import App
from drover.config import ConfigError, load_config

NAN = float("nan")

#: backend name, [backend.settings], what the one line must say.
REFUSED = [
    # A SIGTERM-ignoring container would never be killed; -5 logged "outlived SIGTERM for -5s".
    ("container", {"kill_grace": NAN}, "backend.settings.kill_grace = nan: must be a finite"),
    ("container", {"kill_grace": -5}, "backend.settings.kill_grace = -5.0: must be a finite"),
    ("container", {"kill_grace": 1e9}, "backend.settings.kill_grace = 1000000000.0"),
    # The daemon exited with a traceback at its first API call.
    ("container", {"api_timeout": NAN}, "backend.settings.api_timeout = nan"),
    ("container", {"api_timeout": -1}, "backend.settings.api_timeout = -1.0"),
    # 9 CPU-seconds in 10 s.
    ("container", {"poll_interval": 1e-300}, "backend.settings.poll_interval = 1e-300"),
    ("container", {"poll_interval": float("inf")}, "backend.settings.poll_interval = inf"),
    ("container", {"label_prefix": "d" * 1_000_000}, "label_prefix = 'dddd"),
    ("container", {"label_prefix": "a b"}, "backend.settings.label_prefix = 'a b'"),
    ("container", {"default_image": "x" * 5000}, "default_image = 'xxx"),
    ("container", {"network": "host\n"}, "network = 'host\\n': holds a control character"),
    ("container", {"mount_roots": ["relative"]}, "mount_roots[0] = 'relative': must be an"),
    ("container", {"mount_roots": ["/srv:/x"]}, "mount_roots[0] = '/srv:/x'"),
    ("container", {"mount_roots": ["/"]}, "mount_roots[0] = '/': '/' would let kernels"),
    # asyncio.sleep(nan) returns at once: squeue in a tight loop.
    ("slurm", {"poll_interval": NAN}, "backend.settings.poll_interval = nan"),
    ("slurm", {"nodes_interval": 0}, "backend.settings.nodes_interval = 0.0"),
    ("slurm", {"kill_grace": NAN}, "backend.settings.kill_grace = nan"),
    ("slurm", {"command_timeout": -1}, "backend.settings.command_timeout = -1.0"),
    ("slurm", {"job_name_prefix": "p" * 100_000}, "job_name_prefix = 'ppp"),
    ("slurm", {"signal": "TERM --uid=0"}, "signal = 'TERM --uid=0': must be a signal"),
    ("slurm", {"partition": "main other"}, "partition = 'main other': must be a name"),
]


@pytest.mark.parametrize(("backend", "settings", "problem"), REFUSED)
async def test_a_backend_setting_that_makes_no_sense_is_refused_naming_the_key(
    tmp_path: Path, backend: str, settings: dict, problem: str
):
    flags = {
        "database_url": f"sqlite+aiosqlite:///{tmp_path}/d.db",
        "backend.name": backend,
        "backend.settings": settings,
    }
    app = App(load_config(None, environ={}, flags=flags))
    try:
        with pytest.raises(ConfigError) as refused:
            _ = app.backend
    finally:
        await app.close()
    message = str(refused.value)
    assert message.startswith(f"invalid {backend} backend settings: "), message
    assert problem in message, message
    assert "\n" not in message, message
    assert len(message) < 400, message


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (
            {"backend.agents": [{"id": "a" * 1_000_000, "cpu": 1, "mem": 1}]},
            "agent 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa… (1000002 characters) (from flag "
            "backend.agents): an agent id is at most 255 characters",
        ),
        (
            {"backend.agents": [{"id": "a", "cpu": 1, "mem": 1, "gpu": ["0", "g" * 300]}]},
            "device ids must be distinct, non-empty, at most 255 characters, no control character",
        ),
        ({"backend.kill_grace": NAN}, "backend.kill_grace = nan (from flag backend.kill_grace)"),
        ({"backend.kill_grace": 1e12}, "must be a finite number of seconds from 0 to 86400"),
        ({"backend.run_for": NAN}, "backend.run_for = nan"),
        ({"backend.pull_delay": -1.0}, "backend.pull_delay = -1.0"),
        ({"backend.device_variables": {"gpu": "CUDA DEVICES"}}, "device_variables.gpu = 'CUDA"),
    ],
)
def test_backend_keys_that_make_no_sense_are_configuration_errors(flags: dict, problem: str):
    with pytest.raises(ConfigError) as refused:
        load_config(None, environ={}, flags=flags)
    message = str(refused.value)
    assert problem in message, message
    assert "\n" not in message, message
    assert len(message) < 400, message


def test_the_defaults_and_sane_values_are_accepted(tmp_path: Path):
    """Bounds refuse only what makes no sense: the documented examples pass."""
    from drover.backends.container._settings import settings_from as container
    from drover.backends.slurm._settings import settings_from as slurm

    container({})
    container({"kill_grace": 0, "poll_interval": 0.05, "api_timeout": 3600,
               "mount_roots": ["/srv/data", "/scratch/"], "label_prefix": "drover-2"})  # fmt: skip
    slurm({})
    slurm({"signal": "USR1", "partition": "gpu*", "account": "lab", "job_name_prefix": "t.1_-"})


def test_drover_run_refuses_a_nan_kill_grace_in_one_line_without_a_traceback(tmp_path: Path):
    """`drover run` with kill_grace = nan (TOML's own nan) under [backend.settings]: exit 1,
    one error line naming the key; nothing starts."""
    config = tmp_path / "drover.toml"
    config.write_text(
        f'database_url = "sqlite+aiosqlite:///{tmp_path}/d.db"\n'
        f'data_dir = "{tmp_path}/data"\n'
        "[backend]\n"
        'name = "container"\n'
        "[backend.settings]\n"
        "kill_grace = nan\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DROVER_")}
    done = subprocess.run(
        [sys.executable, "-m", "drover", "--config", str(config), "run"],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert errors == [
        "Error: invalid container backend settings: backend.settings.kill_grace = nan: must be "
        "a finite number of seconds from 0 to 86400"
    ], done.stderr
    assert not (tmp_path / "data").exists()
