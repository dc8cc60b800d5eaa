"""ctxlog's engine from Python, with no server: an agent's turn from the
client's message to the finished task, and the history a next prompt gets.
Run it twice: the second run finds the message already answered and does
no work again, as an agent must when a client resends.

    pip install ./python
    python examples/python/store_basics.py   # a store in ./agent-data
"""

import ctxlog

MESSAGE = {
    "messageId": "m-refund-42",
    "contextId": "case-42",
    "role": "ROLE_USER",
    "parts": [{"text": "Please refund order 42."}],
}

with ctxlog.Store("agent-data") as store:
    # 1. Save the client's message, raw and durable, before any work on it.
    receipt = store.receive_message("acme", MESSAGE)
    task_id, context_id = receipt["taskId"], receipt["contextId"]
    if receipt["duplicate"]:
        # A resend: answer with the task as it stands; no work twice.
        task = store.get_task("acme", task_id)
        print(f"already received: task {task_id} is {task['status']['state']}")
    else:
        # 2. The context's earlier conversation, for the model's prompt,
        #    in a frame no stored text can forge ("" for the first message
        #    of a context, as here).
        prompt = store.render_history("acme", context_id, before=receipt["seq"])
        print(f"history for the prompt: {len(prompt)} characters")
        # 3. The agent's work, stored as it happens.
        ids = {"taskId": task_id, "contextId": context_id}
        store.update_status("acme", {**ids, "status": {"state": "TASK_STATE_WORKING"}})
        store.add_artifact("acme", {**ids, "artifact": {"artifactId": "receipt",
                                                        "parts": [{"text": "Refunded $42.00"}]}})
        reply = {"messageId": f"reply-{task_id}", "role": "ROLE_AGENT",
                 "parts": [{"text": "Done: $42.00 refunded."}]}
        store.update_status("acme", {**ids, "status": {"state": "TASK_STATE_COMPLETED",
                                                       "message": reply}})
        print(f"new task {task_id}: {store.get_task('acme', task_id)['status']['state']}")

    # What the next turn's prompt would show of this case.
    print(store.render_history("acme", context_id))
