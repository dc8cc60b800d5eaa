"""ctxlog.Store from Python: the task model, raw messages, errors, the
read-only open, and threads sharing one store."""

import datetime
import importlib.metadata
import json
import os
import pickle
import threading

import pytest

import ctxlog


def message(mid, text="hello", **ids):
    return json.dumps({"messageId": mid, "role": "ROLE_USER", "parts": [{"text": text}], **ids})


def test_the_task_model_round_trip(store_dir):
    with ctxlog.Store(store_dir) as store:
        r = store.receive_message("acme", message("m1"))
        assert r["newTask"] and r["newContext"] and not r["duplicate"]
        task_id, context_id = r["taskId"], r["contextId"]
        # A resend stores nothing and answers with the first receipt.
        again = store.receive_message("acme", message("m1").encode())
        assert again["duplicate"] and again["taskId"] == task_id
        seq = store.update_status(
            "acme",
            {"taskId": task_id, "contextId": context_id, "status": {"state": "TASK_STATE_WORKING"}},
        )
        assert seq == (task_id, 2)
        store.add_artifact(
            "acme",
            {"taskId": task_id, "contextId": context_id,
             "artifact": {"artifactId": "a1", "parts": [{"text": "report"}]}},
        )
        task = store.get_task("acme", task_id)
        assert task["status"]["state"] == "TASK_STATE_WORKING"
        assert task["artifacts"][0]["artifactId"] == "a1"
        assert [m["messageId"] for m in task["history"]] == ["m1"]
        listed = store.list_tasks("acme", status="TASK_STATE_WORKING")
        assert [t["id"] for t in listed["tasks"]] == [task_id]
        assert store.list_tasks("acme", status="TASK_STATE_COMPLETED")["tasks"] == []
        events = store.events_since("acme", task_id)
        assert [e["seq"] for e in events] == [1, 2, 3]
        assert "statusUpdate" in events[1] and "artifactUpdate" in events[2]
        assert store.cancel_task("acme", task_id)["status"]["state"] == "TASK_STATE_CANCELED"
        # Another tenant sees none of it.
        with pytest.raises(ctxlog.TaskNotFound):
            store.get_task("other", task_id)
        text = store.render_history("acme", context_id)
        assert text.startswith("<<<ctxlog-history nonce=") and "| hello" in text
        assert store.render_history("acme", context_id, before=0) == ""


def test_message_ids_are_scoped_or_taken_as_labels(store_dir):
    with ctxlog.Store(store_dir) as store:
        # Two conversations may both begin at m1.
        a = store.receive_message("acme", message("m1", "first", contextId="ca"))
        b = store.receive_message("acme", message("m1", "second", contextId="cb"))
        assert not b["duplicate"] and b["taskId"] != a["taskId"]
        with pytest.raises(ctxlog.IdempotencyConflict):
            store.receive_message("acme", message("m1", "changed", contextId="ca"))
        # As labels, every message is new.
        x = store.receive_message("acme", message("m2"), message_ids="labels")
        y = store.receive_message("acme", message("m2"), message_ids="labels")
        assert not y["duplicate"] and y["taskId"] != x["taskId"]
        with pytest.raises(ValueError):
            store.receive_message("acme", message("m3"), message_ids="sometimes")


def test_stored_bytes_come_back_as_they_were(store_dir):
    raw = b'{"messageId": "x",  "n": 123456789012345678901234567890, "s": "\\u00e9"}\n'
    with ctxlog.Store(store_dir) as store:
        seq, ts = store.append_message("t", "c", raw)
        store.append_message("t", "c", "second")
        assert seq == 0 and ts > 0
        assert [m[2] for m in store.history("t", "c")] == [raw, b"second"]
        assert [m[0] for m in store.history("t", "c", 1)] == [1]
        page = store.list_contexts("t")
        assert [c["contextId"] for c in page["contexts"]] == ["c"] and page["nextPageToken"] == ""
        stats = store.stats()
        assert stats["contexts"] == 1 and stats["messages"] == 2
        store.delete_context("t", "c")
        store.delete_context("t", "c")  # again: no error
        with pytest.raises(ctxlog.ContextNotFound):
            store.history("t", "c")
        with pytest.raises(ctxlog.ContextRejected):
            store.append_message("t", "c", b"after")
    report = ctxlog.verify(store_dir)
    assert report["clean"] and report["records"] == 3


def test_errors_are_classes_under_ctxlog_error(store_dir, tmp_path):
    with pytest.raises(ctxlog.StoreNotFound):
        ctxlog.Store(tmp_path / "missing", create=False)
    assert not (tmp_path / "missing").exists()
    with ctxlog.Store(store_dir) as store:
        with pytest.raises(ctxlog.InvalidParams) as e:
            store.receive_message("t", '{"messageId":"m","role":"user","parts":[{"kind":"text","text":"x"}]}')
        assert "v0.3" in str(e.value) and isinstance(e.value, ctxlog.Error)
        with pytest.raises(TypeError):
            store.append_message("t", "c", 42)
        with pytest.raises(ValueError):
            store.list_tasks("t", status="busy")
        with pytest.raises(ValueError):
            ctxlog.Store(tmp_path / "x", durability="sometimes")
    store.close()  # closing twice does nothing
    assert store.closed
    with pytest.raises(ctxlog.Error):
        store.stats()


def test_errors_belong_to_ctxlog_and_pickle(store_dir):
    with ctxlog.Store(store_dir) as store:
        with pytest.raises(ctxlog.TaskNotFound) as e:
            store.get_task("acme", "no-such-task")
    raised = e.value
    assert type(raised).__module__ == "ctxlog" and type(raised).__qualname__ == "TaskNotFound"
    # A LookupError too, and it crosses a process boundary intact.
    assert isinstance(raised, LookupError) and isinstance(raised, ctxlog.Error)
    back = pickle.loads(pickle.dumps(raised))
    assert type(back) is ctxlog.TaskNotFound and str(back) == str(raised) != ""
    # Every kind the engine names has its class under ctxlog.Error.
    for name in ctxlog.__all__:
        value = getattr(ctxlog, name)
        if isinstance(value, type) and value is not ctxlog.Error:
            assert issubclass(value, ctxlog.Error) or value is ctxlog.Store, name
    assert issubclass(ctxlog.InvalidParams, ValueError)


def test_dicts_are_taken_wherever_json_is(store_dir):
    with ctxlog.Store(store_dir) as store:
        as_dict = {"messageId": "d1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
        r = store.receive_message("acme", as_dict)
        assert r["newTask"] and not store.receive_message("acme", dict(as_dict))["newTask"]
        seq = store.apply_event(
            "acme",
            {"statusUpdate": {"taskId": r["taskId"], "contextId": r["contextId"],
                              "status": {"state": "TASK_STATE_WORKING"}}},
        )
        assert seq == (r["taskId"], 2)
        store.append_message("acme", "notes", {"note": 1})
        assert json.loads(store.history("acme", "notes")[0][2]) == {"note": 1}
        with pytest.raises(TypeError):
            store.receive_message("acme", ["not", "a", "message"])


def test_listings_read_as_the_cli_prints_them(store_dir):
    with ctxlog.Store(store_dir) as store:
        for i in range(3):
            store.append_message("t", f"c{i}", b"x")
        first = store.list_contexts("t", page_size=2, page_token="")
        assert len(first["contexts"]) == 2 and first["nextPageToken"] != ""
        rest = store.list_contexts("t", page_size=2, page_token=first["nextPageToken"])
        seen = [c["contextId"] for c in first["contexts"] + rest["contexts"]]
        assert sorted(seen) == ["c0", "c1", "c2"] and rest["nextPageToken"] == ""
        when = first["contexts"][0]["firstActivity"]
        assert when.endswith("Z") and datetime.datetime.fromisoformat(when.replace("Z", "+00:00"))


def test_the_version_is_the_package_s():
    assert ctxlog.__version__ == importlib.metadata.version("ctxlog")


def test_a_read_only_store_reads_beside_its_writer(store_dir):
    with ctxlog.Store(store_dir) as writer:
        writer.append_message("t", "c", b"one")
        reader = ctxlog.Store(store_dir, read_only=True)
        assert [m[2] for m in reader.history("t", "c")] == [b"one"]
        with pytest.raises(ctxlog.ReadOnly):
            reader.append_message("t", "c", b"two")
        assert ctxlog.verify(store_dir, read_only=True)["clean"]
        reader.close()


def test_threads_share_one_store(store_dir):
    """Eight threads append to contexts of their own and to one shared
    context at once: nothing is lost, each thread's order is kept."""
    per_thread = 150
    errors = []
    with ctxlog.Store(store_dir, durability="group") as store:

        def work(n):
            try:
                for i in range(per_thread):
                    store.append_message("t", f"own-{n}", f"{n}:{i}")
                    store.append_message("t", "shared", f"{n}:{i}")
            except Exception as e:  # reported below, not lost in the thread
                errors.append(e)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        for n in range(8):
            own = [m[2].decode() for m in store.history("t", f"own-{n}")]
            assert own == [f"{n}:{i}" for i in range(per_thread)]
        shared = [m[2].decode() for m in store.history("t", "shared")]
        assert len(shared) == 8 * per_thread
        for n in range(8):
            mine = [s for s in shared if s.startswith(f"{n}:")]
            assert mine == [f"{n}:{i}" for i in range(per_thread)]
        assert [m[0] for m in store.history("t", "shared")] == list(range(8 * per_thread))


def test_a_call_that_waits_lets_other_threads_run(store_dir):
    """An open that waits for another process to let the store go releases
    the GIL: this process's other threads run meanwhile (here, the one that
    tells the holder to let go). Were the GIL held through the wait, the
    holder could not be told until the wait had run out, and the open would
    fail with Locked. (Within one process a second open shares the first.)"""
    import subprocess
    import sys

    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, ctxlog\n"
         "s = ctxlog.Store(sys.argv[1])\n"
         "s.append_message('t', 'c', b'kept')\n"
         "print('held', flush=True)\n"
         "sys.stdin.read()\n"
         "s.close()\n", str(store_dir)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    waiting = threading.Event()
    opened = []

    def open_second():
        waiting.set()
        try:
            opened.append(ctxlog.Store(store_dir, lock_wait_seconds=20))
        except ctxlog.Error as e:
            opened.append(e)

    second = threading.Thread(target=open_second)
    second.start()
    waiting.wait()
    holder.stdin.close()
    assert holder.wait(timeout=20) == 0
    second.join()
    [store] = opened
    assert isinstance(store, ctxlog.Store), store
    assert [m[2] for m in store.history("t", "c")] == [b"kept"]
    store.close()


def test_a_forked_child_draws_ids_of_its_own(tmp_path):
    # The store draws randomness in blocks per thread; a child made by fork
    # inherits the rest of its parent's block and must not use it, or both
    # would make the same ids.
    def new_context(path):
        with ctxlog.Store(str(path)) as store:
            return store.receive_message("acme", message("m1"))["contextId"]

    new_context(tmp_path / "before")  # fills this thread's block
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_end)
            os.write(write_end, new_context(tmp_path / "child").encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    parent = new_context(tmp_path / "parent")
    with os.fdopen(read_end, "rb") as pipe:
        child = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(child) == len(parent) == 32
    assert child != parent


def test_one_process_opens_a_store_as_often_as_it_likes(store_dir):
    """Every Store of one directory in a process shares one open store
    (as SQLite's connections share a file); another process is still
    refused while it is open, and let in once the last one closes."""
    import subprocess
    import sys

    first = ctxlog.Store(store_dir)
    second = ctxlog.Store(os.path.join(store_dir, "."), create=False)
    first.append_message("t", "c", "from the first")
    second.append_message("t", "c", "from the second")
    assert [m[2] for m in second.history("t", "c")] == [b"from the first", b"from the second"]
    with pytest.raises(ctxlog.InvalidParams):
        ctxlog.Store(store_dir, durability="buffered")
    probe = [sys.executable, "-c",
             "import sys, ctxlog\n"
             "try:\n ctxlog.Store(sys.argv[1], lock_wait_seconds=0)\n"
             "except ctxlog.Locked:\n sys.exit(3)\n", str(store_dir)]
    assert subprocess.run(probe).returncode == 3
    first.close()
    assert first.closed and not second.closed
    with pytest.raises(ctxlog.Error):
        first.stats()
    second.append_message("t", "c", "after the first closed")
    assert subprocess.run(probe).returncode == 3
    second.close()
    assert subprocess.run(probe).returncode == 0
