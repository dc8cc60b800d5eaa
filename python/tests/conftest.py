"""Fixtures of the Python package's tests: a fresh store directory, and
request contexts of distinct owners."""

import pytest

from a2a.auth.user import User
from a2a.server.context import ServerCallContext


class Named(User):
    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._name


def as_owner(name: str) -> ServerCallContext:
    """The context of a request made by ``name``."""
    return ServerCallContext(user=Named(name))


@pytest.fixture
def store_dir(tmp_path):
    return tmp_path / "store"
