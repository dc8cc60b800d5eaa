"""The v1.0 side of the mixed tests, run by the v0.3 suite in the venv of
a2a-sdk 1.3.0 (CTXLOG_V1_PYTHON): one action with a2a-sdk 1.3.0's client
over JSON-RPC, its result printed as JSON on stdout.

    v1_side.py URL TOKEN get TASK_ID
    v1_side.py URL TOKEN send TASK_ID TEXT
    v1_side.py URL TOKEN subscribe TASK_ID READY_FILE
"""

import asyncio
import json
import sys
import uuid

import httpx
from a2a.client import ClientConfig, create_client
from a2a.types import GetTaskRequest, Message, Part, Role, SendMessageRequest, SubscribeToTaskRequest
from google.protobuf import json_format


def as_json(message):
    return json_format.MessageToDict(message)


async def main(url, token, action, task_id, *rest):
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    config = ClientConfig(streaming=action != "send", httpx_client=http,
                          supported_protocol_bindings=["JSONRPC"])
    client = await create_client(url, client_config=config)
    try:
        if action == "get":
            out = as_json(await client.get_task(GetTaskRequest(id=task_id)))
        elif action == "send":
            m = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER,
                        parts=[Part(text=rest[0])], task_id=task_id)
            [event] = [e async for e in client.send_message(SendMessageRequest(message=m))]
            out = as_json(event)
        elif action == "subscribe":
            events = []
            stream = client.subscribe(SubscribeToTaskRequest(id=task_id))
            first = await anext(stream)
            events.append(as_json(first))
            # Subscribed: the test may go on.
            with open(rest[0], "w") as f:
                f.write("ready")
            async for event in stream:
                events.append(as_json(event))
            out = events
        else:
            raise SystemExit(f"unknown action {action}")
    finally:
        await http.aclose()
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(*sys.argv[1:]), 60))
