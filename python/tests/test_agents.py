"""ctxlog.agents.CtxlogSession: the OpenAI Agents SDK's session contract,
checked against the SDK's own SQLiteSession operation by operation (the
example agent's conversation outliving a SIGKILL: test_examples.py)."""

import asyncio
import os
import sys

from hypothesis import given, settings, strategies as st
from agents.memory import SQLiteSession

import ctxlog
from ctxlog.agents import CtxlogSession


item = st.fixed_dictionaries({
    "role": st.sampled_from(["user", "assistant", "system"]),
    "content": st.text(max_size=30),
}) | st.fixed_dictionaries({
    "type": st.just("function_call_output"),
    "call_id": st.text(min_size=1, max_size=8),
    "output": st.text(max_size=20),
})
op = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 1), st.lists(item, max_size=4)),
    st.tuples(st.just("get"), st.integers(0, 1), st.one_of(st.none(), st.integers(-2, 6))),
    st.tuples(st.just("pop"), st.integers(0, 1), st.none()),
    st.tuples(st.just("clear"), st.integers(0, 1), st.none()),
    st.tuples(st.just("reopen"), st.just(0), st.none()),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(op, max_size=40))
def test_every_answer_equals_sqlite_sessions(tmp_path_factory, ops):
    where = tmp_path_factory.mktemp("sessions")
    ids = ["conversation_a", "conversation_b"]

    def open_both():
        return ([CtxlogSession(i, where / "ctxlog") for i in ids],
                [SQLiteSession(i, str(where / "sqlite.db")) for i in ids])

    async def run():
        mine, theirs = open_both()
        for name, which, arg in ops:
            a, b = mine[which], theirs[which]
            if name == "add":
                assert await a.add_items(arg) == await b.add_items(arg)
            elif name == "get":
                assert await a.get_items(arg) == await b.get_items(arg)
            elif name == "pop":
                assert await a.pop_item() == await b.pop_item()
            elif name == "clear":
                assert await a.clear_session() == await b.clear_session()
            else:
                for s in mine + theirs:
                    s.close()
                mine, theirs = open_both()
        for a, b in zip(mine, theirs):
            assert await a.get_items() == await b.get_items()
        for s in mine + theirs:
            s.close()

    asyncio.run(run())


def test_sessions_of_one_directory_share_its_store(tmp_path):
    async def run():
        first = CtxlogSession("a", tmp_path)
        second = CtxlogSession("b", tmp_path)
        assert first.store is second.store
        await first.add_items([{"role": "user", "content": "one"}])
        first.close()
        first.close()  # twice is nothing
        # The other session still has the store open.
        await second.add_items([{"role": "user", "content": "two"}])
        assert not second.store.closed
        try:
            await first.add_items([{"role": "user", "content": "late"}])
        except RuntimeError as e:
            assert "closed" in str(e)
        else:
            raise AssertionError("a closed session took an item")
        second.close()
        assert second.store.closed
        # Reopened: each session has its own items, in the default tenant.
        with ctxlog.Store(tmp_path) as store:
            assert [raw for _, _, raw in store.history("agents", "a")] == [b'{"role": "user", "content": "one"}']
            assert len(store.history("agents", "b")) == 1

    asyncio.run(run())


def test_a_shared_store_stays_open_and_tenants_apart(tmp_path):
    async def run():
        with ctxlog.Store(tmp_path) as store:
            mine = CtxlogSession("s", store, tenant="team-a")
            theirs = CtxlogSession("s", store, tenant="team-b")
            await mine.add_items([{"role": "user", "content": "secret"}])
            assert await theirs.get_items() == []
            assert await theirs.pop_item() is None
            await theirs.clear_session()  # nothing to clear: no error
            mine.close()
            assert not store.closed
            assert len(await CtxlogSession("s", store, tenant="team-a").get_items()) == 1

    asyncio.run(run())


def test_a_message_that_is_not_an_item_is_passed_over(tmp_path):
    """Bytes written to a session's context by other means (the CLI, the
    store) are skipped by reads and taken out by pops, as SQLiteSession
    skips and drops rows that do not parse."""
    async def run():
        with ctxlog.Store(tmp_path) as store:
            session = CtxlogSession("s", store)
            await session.add_items([{"role": "user", "content": "one"}])
            store.append_message("agents", "s", b"not json")
            await session.add_items([{"role": "user", "content": "two"}])
            store.append_message("agents", "s", b"\xff")
            assert [i["content"] for i in await session.get_items(2)] == ["one", "two"]
            assert (await session.pop_item())["content"] == "two"
            assert len(store.history("agents", "s")) == 2  # the \xff went with it
            assert (await session.pop_item())["content"] == "one"
            assert await session.pop_item() is None

    asyncio.run(run())
