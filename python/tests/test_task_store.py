"""CtxlogTaskStore against a2a-sdk's InMemoryTaskStore: every answer the
same, over random sequences of saves, gets, listings and deletes, with the
ctxlog store reopened at random points; and what a save writes."""

import asyncio
import json
import tempfile

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from a2a.server.tasks import InMemoryTaskStore
from a2a.types.a2a_pb2 import (
    Artifact,
    ListTasksRequest,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)

import ctxlog
from ctxlog.a2a import CONTEXT_PREFIX, CtxlogTaskStore
from conftest import as_owner

OWNERS = [as_owner("alice"), as_owner("bob"), as_owner("")]
TASK_IDS = ["t1", "t2", "t3", "t4"]
CONTEXTS = ["c1", "c2"]
STATES = [
    TaskState.TASK_STATE_SUBMITTED,
    TaskState.TASK_STATE_WORKING,
    TaskState.TASK_STATE_INPUT_REQUIRED,
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_CANCELED,
]
# Few distinct times, so that ties (ordered by id) happen.
TIMES = [None, 1_700_000_000, 1_700_000_001, 1_700_000_002]

text = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
metadata_value = st.one_of(st.integers(-(10**6), 10**6).map(float), text, st.booleans(), st.none())

mutation = st.one_of(
    st.tuples(st.just("message"), st.sampled_from([Role.ROLE_USER, Role.ROLE_AGENT]), text,
              st.dictionaries(text, metadata_value, max_size=2)),
    st.tuples(st.just("status"), st.sampled_from(STATES), st.sampled_from(TIMES), st.booleans()),
    st.tuples(st.just("artifact"), st.integers(0, 3), text),
    st.tuples(st.just("metadata"), text, metadata_value),
    st.tuples(st.just("context"), st.sampled_from(CONTEXTS)),
    st.tuples(st.just("drop-artifacts")),
    st.tuples(st.just("edit"), st.integers(0, 10), text),
    st.tuples(st.just("nothing")),
)
operation = st.one_of(
    st.tuples(st.just("save"), st.integers(0, 2), st.sampled_from(TASK_IDS), st.lists(mutation, max_size=3)),
    st.tuples(st.just("get"), st.integers(0, 2), st.sampled_from(TASK_IDS + ["missing"])),
    st.tuples(
        st.just("list"),
        st.integers(0, 2),
        st.sampled_from([None] + CONTEXTS),
        st.sampled_from([0] + STATES),
        st.sampled_from(TIMES),
        st.integers(0, 4),
    ),
    st.tuples(st.just("delete"), st.integers(0, 2), st.sampled_from(TASK_IDS + ["missing"])),
    st.tuples(st.just("reopen")),
)


def mutate(task: Task, change, counter: list, edits: bool) -> None:
    """Changes a task as an a2a-sdk server does between saves (and, with
    ``edits``, as an agent that edits earlier messages in place)."""
    kind = change[0]
    counter[0] += 1
    if kind == "message":
        _, role, body, meta = change
        m = Message(message_id=f"m{counter[0]}", role=role, parts=[Part(text=body)])
        for k, v in meta.items():
            m.metadata[k] = v
        task.history.append(m)
    elif kind == "status":
        _, state, when, with_message = change
        task.status.Clear()
        task.status.state = state
        if when is not None:
            task.status.timestamp.FromSeconds(when)
        if with_message:
            task.status.message.CopyFrom(
                Message(message_id=f"s{counter[0]}", role=Role.ROLE_AGENT, parts=[Part(text="st")])
            )
    elif kind == "artifact":
        _, at, body = change
        artifact = Artifact(artifact_id=f"a{at}", parts=[Part(text=body)])
        if at < len(task.artifacts):
            task.artifacts[at].CopyFrom(artifact)
        else:
            task.artifacts.append(artifact)
    elif kind == "metadata":
        _, k, v = change
        task.metadata[k] = v
    elif kind == "context":
        task.context_id = change[1]
    elif kind == "drop-artifacts":
        del task.artifacts[:]
    elif kind == "edit" and edits and task.history:
        _, at, body = change
        task.history[at % len(task.history)].parts[0].text = body


async def run(ops, directory, check):
    reference = InMemoryTaskStore()
    store = CtxlogTaskStore(directory, check_history=check)
    # What each owner's server would hold of each task: the snapshot it saves.
    current: dict[tuple[int, str], Task] = {}
    counter = [0]
    try:
        for op in ops:
            kind = op[0]
            if kind == "save":
                _, owner, task_id, changes = op
                task = current.get((owner, task_id))
                if task is None:
                    task = Task(id=task_id, context_id="c1",
                                status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED))
                    current[(owner, task_id)] = task
                for change in changes:
                    mutate(task, change, counter, edits=check)
                await reference.save(task, OWNERS[owner])
                await store.save(task, OWNERS[owner])
                # The task as saved, from the cache a save keeps up to date.
                assert await store.get(task_id, OWNERS[owner]) == task
            elif kind == "get":
                _, owner, task_id = op
                assert await store.get(task_id, OWNERS[owner]) == await reference.get(task_id, OWNERS[owner])
            elif kind == "list":
                _, owner, context, state, after, size = op
                request = ListTasksRequest(page_size=size, status=state)
                if context:
                    request.context_id = context
                if after is not None:
                    request.status_timestamp_after.FromSeconds(after)
                for _ in range(len(TASK_IDS) + 2):  # bounded: every page, then one more
                    got = await store.list(request, OWNERS[owner])
                    want = await reference.list(request, OWNERS[owner])
                    assert got == want, (request, got, want)
                    if not want.next_page_token:
                        break
                    request.page_token = want.next_page_token
            elif kind == "delete":
                _, owner, task_id = op
                await reference.delete(task_id, OWNERS[owner])
                await store.delete(task_id, OWNERS[owner])
                current.pop((owner, task_id), None)
            elif kind == "reopen":
                store.close()
                store = CtxlogTaskStore(directory, check_history=check)
        # At the end, every task reads the same from a fresh open.
        store.close()
        store = CtxlogTaskStore(directory)
        for owner in range(len(OWNERS)):
            for task_id in TASK_IDS:
                assert await store.get(task_id, OWNERS[owner]) == await reference.get(task_id, OWNERS[owner])
    finally:
        store.close()


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operation, max_size=40), st.booleans())
# Two artifacts added by one save, then read back from the cache.
@example(
    ops=[("save", 0, "t1", []), ("save", 0, "t1", [("artifact", 0, "a"), ("artifact", 1, "b")])],
    check_history=False,
)
def test_every_answer_equals_the_in_memory_stores(ops, check_history):
    """Histories grow at their end (as a2a-sdk writes them); with
    ``check_history``, earlier messages are also edited in place."""
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(ops, tmp + "/store", check_history))


def records(store: CtxlogTaskStore, owner: str, task_id: str) -> list[bytes]:
    return [raw for _, _, raw in store.store.history(owner, CONTEXT_PREFIX + task_id)]


async def test_a_save_appends_what_changed_and_nothing_for_no_change(store_dir):
    store = CtxlogTaskStore(store_dir)
    alice = as_owner("alice")
    task = Task(id="t", context_id="c", status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED))
    sizes = []
    for turn in range(200):
        task.history.append(Message(message_id=f"u{turn}", role=Role.ROLE_USER, parts=[Part(text=f"question {turn:03}")]))
        task.history.append(Message(message_id=f"a{turn}", role=Role.ROLE_AGENT, parts=[Part(text=f"answer {turn:03}")]))
        task.status.state = STATES[turn % 2 + 1]
        await store.save(task, alice)
        sizes.append(len(records(store, "alice", "t")[-1]))
    # The cost of a save is its change: the 200th record is the size of the
    # 10th, but for the digits of its position and ids.
    assert sizes[10] <= sizes[199] <= sizes[10] + 10
    assert sizes[199] < 400
    before = store.store.stats()["messages"]
    await store.save(task, alice)
    assert store.store.stats()["messages"] == before, "a save that changes nothing appends nothing"
    # The records are JSON in the A2A form, readable by the command line.
    last = json.loads(records(store, "alice", "t")[-1])
    assert last["history"]["add"][0]["messageId"] == "u199"
    assert last["status"] == {"state": "TASK_STATE_INPUT_REQUIRED"}
    store.close()


async def test_owners_never_see_each_others_tasks(store_dir):
    store = CtxlogTaskStore(store_dir)
    task = Task(id="same-id", context_id="c", status=TaskStatus(state=TaskState.TASK_STATE_WORKING))
    await store.save(task, as_owner("alice"))
    assert await store.get("same-id", as_owner("bob")) is None
    assert (await store.list(ListTasksRequest(), as_owner("bob"))).total_size == 0
    await store.delete("same-id", as_owner("bob"))
    assert await store.get("same-id", as_owner("alice")) == task
    # The owner is the ctxlog tenant.
    assert store.store.list_contexts("alice")["contexts"][0]["contextId"] == CONTEXT_PREFIX + "same-id"
    store.close()


async def test_a_shared_store_stays_open_and_a_deleted_task_can_start_again(store_dir):
    with ctxlog.Store(store_dir) as shared:
        store = CtxlogTaskStore(shared)
        alice = as_owner("alice")
        task = Task(id="t", context_id="c", status=TaskStatus(state=TaskState.TASK_STATE_WORKING))
        task.history.append(Message(message_id="m", role=Role.ROLE_USER, parts=[Part(text="x")]))
        await store.save(task, alice)
        await store.delete("t", alice)
        assert await store.get("t", alice) is None
        fresh = Task(id="t", context_id="c2")
        await store.save(fresh, alice)
        store.close()
        assert not shared.closed
        again = CtxlogTaskStore(shared)
        assert await again.get("t", alice) == fresh


def test_a_record_of_an_unknown_form_is_refused(store_dir):
    with ctxlog.Store(store_dir) as shared:
        shared.append_message("alice", CONTEXT_PREFIX + "t", '{"ctxlogTaskStore": 99}')
        store = CtxlogTaskStore(shared)
        with pytest.raises(ctxlog.Error, match="form 99"):
            store.get_sync("alice", "t")


messages = st.builds(
    lambda mid, role, texts, meta, refs, ctx: _message(mid, role, texts, meta, refs, ctx),
    text, st.sampled_from([0, 1, 2, 7]), st.lists(st.tuples(text, st.sampled_from(["", "text/plain"])), max_size=3),
    st.dictionaries(text, st.one_of(metadata_value, st.lists(metadata_value, max_size=2)), max_size=3),
    st.lists(text, max_size=2), st.one_of(st.none(), text),
)


def _message(mid, role, texts, meta, refs, ctx):
    m = Message(message_id=mid, role=role, reference_task_ids=refs)
    for body, media in texts:
        m.parts.append(Part(text=body, media_type=media))
    if meta:
        m.metadata.update(meta)
    if ctx is not None:
        m.context_id = ctx
    return m


@settings(max_examples=200, deadline=None, database=None)
@given(messages, st.sampled_from(STATES + [0, 99]), st.sampled_from(TIMES))
def test_the_json_encoding_is_protobufs(message, state, when):
    """The encoder a save uses writes what protobuf's own printer writes,
    also for what it leaves to the printer (an unknown enum number, a
    timestamp, a Struct)."""
    from google.protobuf import json_format

    from ctxlog.a2a import _dump

    status = TaskStatus(state=state, message=message)
    if when is not None:
        status.timestamp.FromSeconds(when)
    artifact = Artifact(artifact_id="a", parts=list(message.parts), metadata=message.metadata)
    task = Task(id="t", status=status, history=[message, message], artifacts=[artifact])
    for value in (message, status, artifact, task):
        assert _dump(value) == json_format.MessageToDict(value)
