"""Push notifications with the official Python client (a2a-sdk): a config
given with a send and others made, read, listed and deleted through the
client's own methods, on both bindings; the task's updates POSTed to a
receiver this test runs on 127.0.0.1, in order, each a strict
StreamResponse with the config's token."""

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from a2a.types import (
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError

import strict
from test_a2a_sdk_client import BINDINGS, client, message

pytestmark = pytest.mark.asyncio(loop_scope="function")

WAIT = 30


class Receiver:
    """A webhook receiver: records each POST (path, headers, JSON body)
    and answers 200."""

    def __init__(self):
        self.got = []
        self.changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                with receiver.changed:
                    receiver.got.append(
                        (self.path, {k.lower(): v for k, v in self.headers.items()}, body.decode())
                    )
                    receiver.changed.notify_all()
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, done):
        """Waits (at most WAIT seconds) until `done` holds of what arrived."""
        with self.changed:
            return self.changed.wait_for(lambda: done(self.got), timeout=WAIT)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def receiver():
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


def states(got, path):
    return [
        json.loads(body).get("statusUpdate", {}).get("status", {}).get("state")
        for p, _, body in got
        if p == path
    ]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_configs_through_the_client_and_pushes_in_order(server_push, binding):
    with receiver() as hooks:
        inline = TaskPushNotificationConfig(url=hooks.url + "/inline", token="tok-" + binding)
        request = SendMessageRequest(
            message=message("chunks"),
            configuration=SendMessageConfiguration(task_push_notification_config=inline),
        )
        async with client(server_push, binding, streaming=False) as c:
            events = [e async for e in c.send_message(request)]
            task = events[-1].task
            assert task.status.state == TaskState.TASK_STATE_COMPLETED
            assert hooks.wait(lambda got: "TASK_STATE_COMPLETED" in states(got, "/inline"))

            made = await c.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=task.id, id="extra", url=hooks.url + "/extra")
            )
            assert (made.id, made.task_id, made.url) == ("extra", task.id, hooks.url + "/extra")
            # The config given with the send took the task's id.
            got = await c.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task.id, id=task.id)
            )
            assert (got.url, got.token) == (inline.url, inline.token)
            listed = await c.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
            assert [x.id for x in listed.configs] == [task.id, "extra"]
            for _ in range(2):  # idempotent
                await c.delete_task_push_notification_config(
                    DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="extra")
                )
            listed = await c.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
            assert [x.id for x in listed.configs] == [task.id]

        async with client(server_push, binding, tenant="bob", streaming=False) as other:
            with pytest.raises(TaskNotFoundError):
                await other.get_task_push_notification_config(
                    GetTaskPushNotificationConfigRequest(task_id=task.id, id=task.id)
                )

        pushed = [(p, h, b) for p, h, b in hooks.got if p == "/inline"]
        # WORKING, three chunks, COMPLETED: each once, in order.
        kinds = [next(iter(json.loads(b))) for _, _, b in pushed]
        assert kinds == ["statusUpdate"] + ["artifactUpdate"] * 3 + ["statusUpdate"]
        seqs = [int(h["ctxlog-event-seq"]) for _, h, _ in pushed]
        assert seqs == sorted(set(seqs))
        for _, headers, body in pushed:
            assert headers["content-type"] == "application/a2a+json"
            assert headers["x-a2a-notification-token"] == "tok-" + binding
            strict.parse(body, strict.StreamResponse)
            assert json.loads(body)[next(iter(json.loads(body)))]["taskId"] == task.id
        # The task had ended before "extra" was made: nothing for it.
        assert not [p for p, _, _ in hooks.got if p == "/extra"]
