//! Random sequences of receive / status / artifact / cancel / get / list
//! operations against a plain in-memory model of the A2A rules, with the
//! store reopened at random points; every answer is compared.

use crate::common;

use std::collections::HashMap;

use ctxlog::a2a::{
    Artifact, Part, TaskArtifactUpdateEvent, TaskState, TaskStatus, TaskStatusUpdateEvent,
};
use ctxlog::{Durability, Error, ListTasksQuery, Options, Receipt, Store};
use proptest::prelude::*;
use serde_json::{json, Value};

const TENANTS: [&str; 2] = ["alpha", "beta"];

#[derive(Debug, Clone)]
enum OpSpec {
    Receive {
        tenant: usize,
        target: u8,
        pick: usize,
        msg: u8,
        text: u8,
    },
    Status {
        pick: usize,
        state: usize,
        with_message: bool,
        wrong_tenant: bool,
    },
    Artifact {
        pick: usize,
        artifact: u8,
        append: bool,
        last: bool,
    },
    Cancel {
        pick: usize,
    },
    Get {
        pick: usize,
        history_length: Option<usize>,
    },
    List {
        tenant: usize,
    },
    Reopen,
}

fn op() -> impl Strategy<Value = OpSpec> {
    prop_oneof![
        4 => (0..2usize, 0..3u8, any::<usize>(), 0..8u8, 0..3u8)
            .prop_map(|(tenant, target, pick, msg, text)| OpSpec::Receive { tenant, target, pick, msg, text }),
        3 => (any::<usize>(), 0..9usize, any::<bool>(), proptest::bool::weighted(0.1))
            .prop_map(|(pick, state, with_message, wrong_tenant)| OpSpec::Status { pick, state, with_message, wrong_tenant }),
        2 => (any::<usize>(), 0..2u8, any::<bool>(), proptest::bool::weighted(0.3))
            .prop_map(|(pick, artifact, append, last)| OpSpec::Artifact { pick, artifact, append, last }),
        1 => any::<usize>().prop_map(|pick| OpSpec::Cancel { pick }),
        2 => (any::<usize>(), proptest::option::of(0..3usize))
            .prop_map(|(pick, history_length)| OpSpec::Get { pick, history_length }),
        1 => (0..2usize).prop_map(|tenant| OpSpec::List { tenant }),
        1 => Just(OpSpec::Reopen),
    ]
}

#[derive(Debug, Clone)]
struct ModelTask {
    id: String,
    context: String,
    tenant: usize,
    state: TaskState,
    history: Vec<Value>,
    artifacts: Vec<(String, Vec<String>, bool)>,
}

#[derive(Default)]
struct Model {
    tasks: Vec<ModelTask>,
    contexts: Vec<(usize, String)>,
    /// By (tenant, the context a messageId is recognised in, or none for
    /// the tenant's own scope, messageId).
    received: HashMap<(usize, Option<String>, u8), (Value, Receipt)>,
}

fn kind<T>(r: &Result<T, Error>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(e) => e.kind_name(),
    }
}

fn run(ops: Vec<OpSpec>) -> Result<(), TestCaseError> {
    let dir = common::tmp();
    // Checkpoints every 2 KiB: written while the model runs, each takes over
    // the messageIds, records and tasks the index still reads from the one
    // before (and a reopen reads them in place from the last).
    let options = Options::default()
        .durability(Durability::Buffered)
        .segment_bytes(8192)
        .checkpoint_interval(Some(2048));
    let mut store = Store::open(dir.path(), options.clone()).unwrap();
    let mut model = Model::default();
    for op in ops {
        match op {
            OpSpec::Receive {
                tenant,
                target,
                pick,
                msg,
                text,
            } => {
                let mut m = json!({
                    "messageId": format!("m{msg}"), "role": "ROLE_USER",
                    "parts": [{ "text": format!("text {text}") }],
                });
                let mut expect_task: Option<usize> = None;
                let mut expect_context: Option<String> = None;
                if target == 1 && !model.contexts.is_empty() {
                    let (_, c) = &model.contexts[pick % model.contexts.len()];
                    m["contextId"] = json!(c);
                    expect_context = Some(c.clone());
                } else if target == 2 && !model.tasks.is_empty() {
                    let i = pick % model.tasks.len();
                    m["taskId"] = json!(model.tasks[i].id);
                    expect_task = Some(i);
                }
                let got = store.receive_message(TENANTS[tenant], &serde_json::to_vec(&m).unwrap());
                // A messageId is recognised in the context the message
                // names, or its task's, or the tenant's own scope for one
                // that names neither; another tenant's task is unknown
                // before anything is looked up.
                let scope = match (&expect_context, expect_task) {
                    (Some(c), _) => Some(c.clone()),
                    (None, Some(i)) if model.tasks[i].tenant != tenant => {
                        prop_assert_eq!(kind(&got), "TaskNotFound");
                        continue;
                    }
                    (None, Some(i)) => Some(model.tasks[i].context.clone()),
                    (None, None) => None,
                };
                if let Some((first, receipt)) = model.received.get(&(tenant, scope.clone(), msg)) {
                    if *first == m {
                        let r = got.map_err(|e| TestCaseError::fail(e.to_string()))?;
                        prop_assert!(r.duplicate);
                        prop_assert_eq!(&r.task_id, &receipt.task_id);
                        prop_assert_eq!(&r.context_id, &receipt.context_id);
                    } else {
                        prop_assert_eq!(kind(&got), "IdempotencyConflict");
                    }
                    continue;
                }
                match expect_task {
                    Some(i) => {
                        let t = &model.tasks[i];
                        let want = if t.tenant != tenant {
                            "TaskNotFound"
                        } else if t.state.is_terminal() {
                            "UnsupportedOperation"
                        } else {
                            "ok"
                        };
                        prop_assert_eq!(kind(&got), want);
                        if let Ok(r) = got {
                            prop_assert_eq!(&r.task_id, &t.id);
                            prop_assert_eq!(&r.context_id, &t.context);
                            model.tasks[i].history.push(m.clone());
                            // The client's answer is taken: the task works
                            // on it until the agent writes again.
                            let state = &mut model.tasks[i].state;
                            if matches!(state, TaskState::InputRequired | TaskState::AuthRequired) {
                                *state = TaskState::Working;
                            }
                            model.received.insert((tenant, scope, msg), (m, r));
                        }
                    }
                    None => {
                        let r = got.map_err(|e| TestCaseError::fail(e.to_string()))?;
                        prop_assert!(r.new_task && !r.duplicate);
                        let known = model
                            .contexts
                            .iter()
                            .any(|(t, c)| *t == tenant && *c == r.context_id);
                        prop_assert_eq!(r.new_context, !known);
                        if let Some(c) = expect_context {
                            prop_assert_eq!(&r.context_id, &c);
                        }
                        if !known {
                            model.contexts.push((tenant, r.context_id.clone()));
                        }
                        model.tasks.push(ModelTask {
                            id: r.task_id.clone(),
                            context: r.context_id.clone(),
                            tenant,
                            state: TaskState::Submitted,
                            history: vec![m.clone()],
                            artifacts: Vec::new(),
                        });
                        // Recognised in its new context too.
                        let in_context = (tenant, Some(r.context_id.clone()), msg);
                        model.received.insert(in_context, (m.clone(), r.clone()));
                        model.received.insert((tenant, scope, msg), (m, r));
                    }
                }
            }
            OpSpec::Status {
                pick,
                state,
                with_message,
                wrong_tenant,
            } => {
                if model.tasks.is_empty() {
                    continue;
                }
                let n = model.tasks.len();
                let t = &mut model.tasks[pick % n];
                let state = TaskState::ALL[state];
                let message = with_message.then(|| {
                    json!({ "messageId": format!("s{}", t.history.len()), "role": "ROLE_AGENT", "parts": [{ "text": "status" }] })
                });
                let event = TaskStatusUpdateEvent {
                    task_id: t.id.clone(),
                    context_id: t.context.clone(),
                    status: TaskStatus {
                        state,
                        message: message.clone().map(|v| serde_json::from_value(v).unwrap()),
                        timestamp: None,
                        extra: Default::default(),
                    }
                    .into(),
                    metadata: None,
                };
                let tenant = if wrong_tenant { 1 - t.tenant } else { t.tenant };
                let got = store.update_status(TENANTS[tenant], &event);
                let want = if wrong_tenant {
                    "TaskNotFound"
                } else if t.state.is_terminal() {
                    "UnsupportedOperation"
                } else if state == TaskState::Unspecified {
                    "InvalidParams"
                } else {
                    "ok"
                };
                prop_assert_eq!(kind(&got), want);
                if got.is_ok() {
                    t.state = state;
                    t.history.extend(message);
                }
            }
            OpSpec::Artifact {
                pick,
                artifact,
                append,
                last,
            } => {
                if model.tasks.is_empty() {
                    continue;
                }
                let n = model.tasks.len();
                let t = &mut model.tasks[pick % n];
                let id = format!("art{artifact}");
                let text = format!("chunk{}", t.artifacts.len());
                let event = TaskArtifactUpdateEvent {
                    task_id: t.id.clone(),
                    context_id: t.context.clone(),
                    artifact: Artifact {
                        artifact_id: id.clone(),
                        name: None,
                        description: None,
                        parts: vec![Part::text(text.clone())],
                        metadata: None,
                        extensions: Vec::new(),
                        extra: Default::default(),
                    }
                    .into(),
                    append,
                    last_chunk: last,
                    metadata: None,
                };
                let got = store.add_artifact(TENANTS[t.tenant], &event);
                let existing = t.artifacts.iter().position(|a| a.0 == id);
                let want = if t.state.is_terminal() {
                    "UnsupportedOperation"
                } else if existing.is_some_and(|i| t.artifacts[i].2)
                    || (append && existing.is_none())
                {
                    "InvalidParams"
                } else {
                    "ok"
                };
                prop_assert_eq!(kind(&got), want);
                if got.is_ok() {
                    match existing {
                        Some(i) if append => {
                            t.artifacts[i].1.push(text);
                            t.artifacts[i].2 = last;
                        }
                        Some(i) => t.artifacts[i] = (id, vec![text], last),
                        None => t.artifacts.push((id, vec![text], last)),
                    }
                }
            }
            OpSpec::Cancel { pick } => {
                if model.tasks.is_empty() {
                    continue;
                }
                let n = model.tasks.len();
                let t = &mut model.tasks[pick % n];
                let got = store.cancel_task(TENANTS[t.tenant], &t.id);
                let want = if t.state.is_terminal() {
                    "TaskNotCancelable"
                } else {
                    "ok"
                };
                prop_assert_eq!(kind(&got), want);
                if got.is_ok() {
                    t.state = TaskState::Canceled;
                }
            }
            OpSpec::Get {
                pick,
                history_length,
            } => {
                if model.tasks.is_empty() {
                    continue;
                }
                let t = &model.tasks[pick % model.tasks.len()];
                let task = store
                    .get_task(TENANTS[t.tenant], &t.id, history_length, true)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(task.status.state, t.state);
                prop_assert_eq!(&task.context_id, &t.context);
                let keep = history_length.unwrap_or(usize::MAX);
                let want: Vec<Value> = t.history[t.history.len().saturating_sub(keep)..].to_vec();
                let got: Vec<Value> = task
                    .history
                    .iter()
                    .map(|m| serde_json::to_value(m).unwrap())
                    .collect();
                prop_assert_eq!(got, want);
                let arts: Vec<(String, Vec<String>, bool)> = task
                    .artifacts
                    .unwrap()
                    .into_iter()
                    .map(|a| {
                        let a = a.into_inner();
                        let closed = t.artifacts.iter().any(|m| m.0 == a.artifact_id && m.2);
                        (
                            a.artifact_id,
                            a.parts.into_iter().map(|p| p.text.unwrap()).collect(),
                            closed,
                        )
                    })
                    .collect();
                prop_assert_eq!(arts, t.artifacts.clone());
                let other = store.get_task(TENANTS[1 - t.tenant], &t.id, None, false);
                prop_assert_eq!(kind(&other), "TaskNotFound");
            }
            OpSpec::List { tenant } => {
                let got = store
                    .list_tasks(
                        TENANTS[tenant],
                        &ListTasksQuery {
                            page_size: Some(100),
                            ..Default::default()
                        },
                    )
                    .unwrap();
                let mut ids: Vec<String> = got.tasks.iter().map(|t| t.id.clone()).collect();
                let mut want: Vec<String> = model
                    .tasks
                    .iter()
                    .filter(|t| t.tenant == tenant)
                    .map(|t| t.id.clone())
                    .collect();
                prop_assert_eq!(got.total_size as usize, want.len());
                ids.sort();
                want.sort();
                prop_assert_eq!(ids, want);
            }
            OpSpec::Reopen => {
                store.close().unwrap();
                store = Store::open(dir.path(), options.clone()).unwrap();
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn the_task_model_matches_a_plain_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops)?;
    }
}
