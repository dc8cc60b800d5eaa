"""``CtxlogPushNotificationConfigStore`` against a2a-sdk's
``InMemoryPushNotificationConfigStore``: random sequences of sets, reads,
dispatch reads and deletes by several owners, with reopens in between;
every answer equal. And what the in-memory store cannot show: the configs
outlive the process, and share a store with ``CtxlogTaskStore``."""

import asyncio
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a2a.server.tasks import InMemoryPushNotificationConfigStore
from a2a.types.a2a_pb2 import AuthenticationInfo, Task, TaskPushNotificationConfig

import ctxlog
from ctxlog.a2a import (
    DISPATCH_TENANT,
    PUSH_CONTEXT_PREFIX,
    CtxlogPushNotificationConfigStore,
    CtxlogTaskStore,
)
from conftest import as_owner

OWNERS = [as_owner("alice"), as_owner("bob")]
TASKS = ["t1", "t2"]
IDS = ["", "c1", "c2"]


def config(config_id: str, url: str, token: str, with_auth: bool) -> TaskPushNotificationConfig:
    c = TaskPushNotificationConfig(id=config_id, url=url, token=token)
    if with_auth:
        c.authentication.CopyFrom(AuthenticationInfo(scheme="Bearer", credentials="s3cret"))
    return c


owner = st.integers(0, len(OWNERS) - 1)
task = st.sampled_from(TASKS)
operation = st.one_of(
    st.tuples(
        st.just("set"), owner, task, st.sampled_from(IDS),
        st.sampled_from(["http://a.example/h", "http://b.example/h"]),
        st.sampled_from(["", "tok"]), st.booleans(),
    ),
    st.tuples(st.just("get"), owner, task),
    st.tuples(st.just("dispatch"), task),
    st.tuples(st.just("delete"), owner, task, st.sampled_from(IDS[1:] + [None])),
    st.tuples(st.just("reopen")),
)


async def run(ops, directory):
    reference = InMemoryPushNotificationConfigStore()
    store = CtxlogPushNotificationConfigStore(directory)
    try:
        for op in ops:
            kind = op[0]
            if kind == "set":
                _, who, task_id, config_id, url, token, auth = op
                c = config(config_id, url, token, auth)
                want = await reference.set_info(task_id, c, OWNERS[who])
                assert await store.set_info(task_id, c, OWNERS[who]) == want
            elif kind == "get":
                _, who, task_id = op
                assert await store.get_info(task_id, OWNERS[who]) == await reference.get_info(
                    task_id, OWNERS[who]
                )
            elif kind == "dispatch":
                _, task_id = op
                got = await store.get_info_for_dispatch(task_id)
                want = await reference.get_info_for_dispatch(task_id)
                # The same configs; owners may come in another order.
                key = lambda c: c.SerializeToString(deterministic=True)  # noqa: E731
                assert sorted(got, key=key) == sorted(want, key=key)
            elif kind == "delete":
                _, who, task_id, config_id = op
                await reference.delete_info(task_id, OWNERS[who], config_id)
                await store.delete_info(task_id, OWNERS[who], config_id)
            elif kind == "reopen":
                store.close()
                store = CtxlogPushNotificationConfigStore(directory)
        store.close()
        store = CtxlogPushNotificationConfigStore(directory)
        for who in range(len(OWNERS)):
            for task_id in TASKS:
                assert await store.get_info(task_id, OWNERS[who]) == await reference.get_info(
                    task_id, OWNERS[who]
                )
    finally:
        store.close()


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, max_size=30))
def test_every_answer_equals_the_in_memory_stores(ops):
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(ops, tmp + "/store"))


async def test_configs_share_a_store_with_the_tasks_and_outlive_it(store_dir):
    shared = ctxlog.Store(str(store_dir))
    tasks = CtxlogTaskStore(shared)
    pushes = CtxlogPushNotificationConfigStore(shared)
    alice = OWNERS[0]
    await tasks.save(Task(id="t1", context_id="c"), alice)
    stored = await pushes.set_info("t1", config("", "http://a.example/h", "tok", True), alice)
    # An empty id is the task's, as a2a-sdk normalises it.
    assert (stored.id, stored.task_id) == ("t1", "t1")
    assert await pushes.get_info("t1", OWNERS[1]) == []
    tasks.close()
    pushes.close()
    # Each record is one message of the owner's context for the task.
    assert len(shared.history("alice", PUSH_CONTEXT_PREFIX + "t1")) == 1
    assert len(shared.history(DISPATCH_TENANT, "owners:t1")) == 1
    shared.close()

    reopened = CtxlogPushNotificationConfigStore(store_dir)
    try:
        assert await reopened.get_info("t1", alice) == [stored]
        assert await reopened.get_info_for_dispatch("t1") == [stored]
        await reopened.delete_info("t1", alice)
        assert await reopened.get_info_for_dispatch("t1") == []
    finally:
        reopened.close()
