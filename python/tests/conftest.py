"""Shared fixtures: the repository, the `toolgate` binary (built with cargo), Redis."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ROOT / "policies"
TRACES = ROOT / "examples" / "traces"

if os.environ.get("CI"):
    # CI installs every adapter's framework: one that is missing fails the run here instead of
    # letting its test file's `pytest.importorskip` skip it.
    import importlib

    # CrewAI's tests run in a venv of their own (its dependencies cannot share one with
    # openai-agents): there TOOLGATE_TEST_FRAMEWORKS=crewai names what must be present.
    _required = os.environ.get("TOOLGATE_TEST_FRAMEWORKS", "langchain.agents,agents,pydantic_ai,claude_agent_sdk,google.adk")
    for _framework in filter(None, _required.split(",")):
        importlib.import_module(_framework)


@pytest.fixture(scope="session")
def toolgate_bin() -> Path:
    """The CLI, for comparing against: $TOOLGATE_BIN, else built with cargo (debug)."""
    given = os.environ.get("TOOLGATE_BIN")
    if given:
        return Path(given)
    cargo = shutil.which("cargo")
    assert cargo, "cargo is needed to build the toolgate binary the tests compare against"
    subprocess.run([cargo, "build", "--quiet", "--bin", "toolgate"], cwd=ROOT, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    if not target.is_absolute():
        target = ROOT / target
    path = target / "debug" / "toolgate"
    assert path.exists(), path
    return path


@pytest.fixture(scope="session")
def redis_url() -> str:
    return os.environ.get("TOOLGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture
def uid() -> str:
    """A unique id for run/agent ids and key prefixes (the Redis server is shared)."""
    return "pytest-" + uuid.uuid4().hex[:12]


@pytest.fixture
def tmp(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
