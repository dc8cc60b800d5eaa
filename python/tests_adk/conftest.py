"""Fixtures of ``ctxlog.adk``'s tests (a venv of their own: google-adk
pins versions the other extras' tests cannot share)."""

import pytest


@pytest.fixture
def store_dir(tmp_path):
    return tmp_path / "store"
