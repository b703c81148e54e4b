"""A throw-away PostgreSQL server for the history tests: initdb + pg_ctl on a temporary dir.

The server binaries come from Debian's postgresql package (/usr/lib/postgresql/N/bin;
`.ci/run` installs it when missing). PostgreSQL refuses to run as root, so as root the
server runs as the `postgres` user the package creates. It listens on 127.0.0.1 at a
free port, with password (scram) authentication, so a wrong password is really
refused. Under CI=true a server that cannot start fails the test instead of skipping it.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

USER = "epbench"
PASSWORD = "s3cret-for-tests"
DATABASE = "epbench_history"


def server_bin_dir() -> Path | None:
    """The newest PostgreSQL server bin directory (with initdb and pg_ctl), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PgServer:
    root: Path
    port: int
    bin_dir: Path
    run_as: str | None

    def url(self, *, password: str = PASSWORD, database: str = DATABASE) -> str:
        return f"postgresql://{USER}:{password}@127.0.0.1:{self.port}/{database}"

    def _cmd(self, *args: str) -> list[str]:
        return ["runuser", "-u", self.run_as, "--", *args] if self.run_as else list(args)

    def run(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self._cmd(str(self.bin_dir / tool), *args), capture_output=True,
                              text=True, timeout=120, cwd=self.root)

    def createdb(self, name: str) -> None:
        env = {**os.environ, "PGPASSWORD": PASSWORD}
        subprocess.run([str(self.bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
                        "-U", USER, name], check=True, env=env, capture_output=True)

    def stop(self) -> None:
        self.run("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


def start_server() -> PgServer:
    """initdb, start and create the test database; raises RuntimeError saying why not."""
    bin_dir = server_bin_dir()
    if bin_dir is None:
        raise RuntimeError("no PostgreSQL server binaries (initdb); `apt-get install postgresql`")
    run_as = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise RuntimeError("running as root and there is no `postgres` user to run the "
                               "server as; install Debian's postgresql package") from None
        run_as = "postgres"
    # Not under pytest's tmp_path: its 0700 parents would keep the postgres user out.
    root = Path(tempfile.mkdtemp(prefix="epbench-pg-"))
    (root / "pw").write_text(PASSWORD + "\n")
    if run_as:
        entry = pwd.getpwnam(run_as)
        for path in (root, root / "pw"):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    server = PgServer(root, _free_port(), bin_dir, run_as)
    init = server.run("initdb", "-D", str(root / "data"), "-U", USER, "--pwfile", str(root / "pw"),
                      "--auth-host=scram-sha-256", "--auth-local=scram-sha-256", "-E", "UTF8",
                      "--no-sync")
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {init.stderr.strip()[-400:]}")
    options = f"-p {server.port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    started = server.run("pg_ctl", "-D", str(root / "data"), "-o", options,
                         "-l", str(root / "log"), "-w", "-t", "60", "start")
    if started.returncode != 0:
        log = (root / "log").read_text() if (root / "log").exists() else ""
        server.stop()
        raise RuntimeError(f"pg_ctl start failed: {started.stderr.strip()} {log[-400:]}")
    try:
        server.createdb(DATABASE)
    except subprocess.CalledProcessError as exc:
        server.stop()
        raise RuntimeError(f"createdb failed: {exc.stderr}") from None
    return server


def server_or_skip() -> PgServer:
    """A started server; without one, skip, except under CI=true where it is a failure."""
    try:
        return start_server()
    except RuntimeError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and no PostgreSQL server could start: {exc}")
        pytest.skip(f"no PostgreSQL server: {exc}")
