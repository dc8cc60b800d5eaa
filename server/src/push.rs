//! Push notification configs (A2A §3.1.7-3.1.10): the methods both
//! bindings call, and the config a send carries. A config is stored in
//! its task's context (the engine's `set_push_config` and the rest) before
//! the call answers; its delivery is `delivery.rs`'s.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::delivery::spawn;
use crate::error::A2aError;
use crate::state::Shared;
use crate::webhook::{Authentication, Stored, Target};

/// `TaskPushNotificationConfig` as a client sends it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConfigIn {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    task_id: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    authentication: Option<Authentication>,
    // The tenant comes from the caller's credentials.
    #[serde(default, rename = "tenant")]
    _tenant: Option<Value>,
}

/// `TaskPushNotificationConfig` as the server answers it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConfigOut {
    id: String,
    task_id: String,
    #[serde(flatten)]
    stored: Stored,
}

/// `ListTaskPushNotificationConfigsResponse`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConfigList {
    configs: Vec<ConfigOut>,
    next_page_token: String,
}

/// `GetTaskPushNotificationConfigRequest`, `DeleteTaskPushNotificationConfigRequest`
/// and `ListTaskPushNotificationConfigsRequest`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConfigRef {
    #[serde(default)]
    pub(crate) task_id: String,
    #[serde(default)]
    pub(crate) id: Option<String>,
    #[serde(default)]
    pub(crate) page_size: Option<i64>,
    #[serde(default)]
    pub(crate) page_token: Option<String>,
    #[serde(default, rename = "tenant")]
    _tenant: Option<Value>,
}

/// The config checked: its id (the task's id when it names none, as
/// a2a-sdk does), and what the store keeps.
struct Checked {
    id: String,
    json: Vec<u8>,
}

pub(crate) fn enabled(shared: &Shared) -> Result<(), A2aError> {
    match shared.config.push.enabled {
        true => Ok(()),
        false => Err(A2aError::PushNotificationNotSupported),
    }
}

/// Checks a config before anything is stored: a URL a delivery may go to,
/// header-safe token and credentials.
fn check(shared: &Shared, config: ConfigIn, task_id: &str) -> Result<Checked, A2aError> {
    if config
        .task_id
        .as_deref()
        .is_some_and(|t| !t.is_empty() && t != task_id)
    {
        return Err(A2aError::invalid(format!(
            "taskId: the config names task {:?} but is given for task {task_id:?}",
            config.task_id.unwrap_or_default()
        )));
    }
    let url = config.url.filter(|u| !u.is_empty()).ok_or_else(|| {
        A2aError::invalid("url: a push notification config needs the webhook's URL")
    })?;
    Target::parse(&url, shared.config.push.allow_private).map_err(A2aError::invalid)?;
    let stored = Stored {
        url,
        token: config.token.filter(|t| !t.is_empty()),
        authentication: config.authentication,
    };
    stored.headers().map_err(A2aError::invalid)?;
    let id = config
        .id
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| task_id.to_string());
    let json = serde_json::to_vec(&stored)
        .map_err(|e| A2aError::Internal(format!("the config could not be written: {e}")))?;
    Ok(Checked { id, json })
}

fn answer(task_id: &str, config: ctxlog::PushConfig) -> Result<ConfigOut, A2aError> {
    let stored: Stored = serde_json::from_slice(&config.config)
        .map_err(|_| A2aError::Internal("a stored push config could not be read".into()))?;
    Ok(ConfigOut {
        id: config.config_id,
        task_id: task_id.to_string(),
        stored,
    })
}

/// `CreateTaskPushNotificationConfig`: stored durably, then delivered to
/// from the task's next event on.
pub(crate) async fn create(
    shared: &Arc<Shared>,
    tenant: &str,
    task_id: Option<String>,
    config: ConfigIn,
) -> Result<ConfigOut, A2aError> {
    enabled(shared)?;
    let task_id = task_id
        .filter(|t| !t.is_empty())
        .or_else(|| config.task_id.clone())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| A2aError::invalid("taskId: name the task the config is for"))?;
    let checked = check(shared, config, &task_id)?;
    visible(shared, tenant, &task_id).await?;
    let id = set(shared, tenant, &task_id, checked, None).await?;
    get(shared, tenant, &task_id, Some(id)).await
}

/// Stores a checked config (delivering after event `after`, or after the
/// task's events so far) and starts its delivery.
async fn set(
    shared: &Arc<Shared>,
    tenant: &str,
    task_id: &str,
    checked: Checked,
    after: Option<u64>,
) -> Result<String, A2aError> {
    let (t, id, config_id) = (tenant.to_string(), task_id.to_string(), checked.id.clone());
    let stored = shared
        .store
        .blocking(move |store| {
            if after.is_some() {
                // A resent send with its config: the one stored stands.
                let same = store
                    .push_configs(&t, &id)?
                    .into_iter()
                    .find(|c| c.config_id == config_id && c.config == checked.json);
                if let Some(same) = same {
                    return Ok(same);
                }
            }
            store.set_push_config(&t, &id, &config_id, &checked.json, after)
        })
        .await?;
    let id = stored.config_id.clone();
    spawn(shared, tenant, task_id, &id, Some(stored));
    Ok(id)
}

/// A config given with `SendMessage`, checked before the message is
/// received (a bad one stores nothing).
pub(crate) fn check_inline(shared: &Shared, config: &Value) -> Result<(), A2aError> {
    enabled(shared)?;
    let mut parsed: ConfigIn = serde_json::from_value(config.clone())
        .map_err(|e| A2aError::invalid(format!("taskPushNotificationConfig: {e}")))?;
    // The task is not known yet (and the spec has the client leave its
    // id empty here).
    parsed.task_id = None;
    check(shared, parsed, "").map(drop)
}

/// Stores a config given with `SendMessage` for the task the message
/// went to: delivered from the first event after the message.
pub(crate) async fn set_inline(
    shared: &Arc<Shared>,
    tenant: &str,
    receipt: &ctxlog::Receipt,
    config: &Value,
) -> Result<(), A2aError> {
    let mut parsed: ConfigIn = serde_json::from_value(config.clone())
        .map_err(|e| A2aError::invalid(format!("taskPushNotificationConfig: {e}")))?;
    parsed.task_id = None;
    let checked = check(shared, parsed, &receipt.task_id)?;
    set(
        shared,
        tenant,
        &receipt.task_id,
        checked,
        Some(receipt.event),
    )
    .await?;
    Ok(())
}

/// `GetTaskPushNotificationConfig` (`id: None`: the task's one made by a
/// create that named none, whose id is the task's).
pub(crate) async fn get(
    shared: &Arc<Shared>,
    tenant: &str,
    task_id: &str,
    id: Option<String>,
) -> Result<ConfigOut, A2aError> {
    enabled(shared)?;
    let want = id
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| task_id.to_string());
    let found = configs(shared, tenant, task_id)
        .await?
        .into_iter()
        .find(|c| c.config_id == want)
        .ok_or(A2aError::TaskNotFound)?;
    answer(task_id, found)
}

/// `ListTaskPushNotificationConfigs`: every config, in one page.
pub(crate) async fn list(
    shared: &Arc<Shared>,
    tenant: &str,
    params: ConfigRef,
) -> Result<ConfigList, A2aError> {
    enabled(shared)?;
    if params.page_size.is_some_and(|n| n < 0) {
        return Err(A2aError::invalid("pageSize: send 0 or more"));
    }
    if params.page_token.as_deref().is_some_and(|t| !t.is_empty()) {
        return Err(A2aError::invalid(
            "pageToken: every config comes in the first page; there is no next one",
        ));
    }
    let configs = configs(shared, tenant, &params.task_id)
        .await?
        .into_iter()
        .map(|c| answer(&params.task_id, c))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ConfigList {
        configs,
        next_page_token: String::new(),
    })
}

/// `DeleteTaskPushNotificationConfig`: idempotent; its delivery stops.
pub(crate) async fn delete(
    shared: &Arc<Shared>,
    tenant: &str,
    task_id: &str,
    id: Option<String>,
) -> Result<Value, A2aError> {
    enabled(shared)?;
    let id = id
        .filter(|i| !i.is_empty())
        .ok_or_else(|| A2aError::invalid("id: name the push notification config to delete"))?;
    let (t, task, config) = (tenant.to_string(), task_id.to_string(), id.clone());
    visible(shared, tenant, task_id).await?;
    shared
        .store
        .blocking(move |store| store.delete_push_config(&t, &task, &config))
        .await?;
    shared
        .pushes
        .stop(&(tenant.to_string(), task_id.to_string(), id));
    Ok(Value::Object(serde_json::Map::new()))
}

async fn configs(
    shared: &Shared,
    tenant: &str,
    task_id: &str,
) -> Result<Vec<ctxlog::PushConfig>, A2aError> {
    visible(shared, tenant, task_id).await?;
    let (t, id) = (tenant.to_string(), task_id.to_string());
    shared
        .store
        .blocking(move |store| store.push_configs(&t, &id))
        .await
}

/// A task the client may see: a direct reply's is none.
async fn visible(shared: &Shared, tenant: &str, task_id: &str) -> Result<(), A2aError> {
    let (t, id) = (tenant.to_string(), task_id.to_string());
    let progress = shared
        .store
        .blocking(move |store| store.task_progress(&t, &id))
        .await?;
    match progress.direct_reply {
        true => Err(A2aError::TaskNotFound),
        false => Ok(()),
    }
}
