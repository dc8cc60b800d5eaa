//! Push notification configs (A2A §3.1.7-3.1.10): the methods both
//! bindings call, and the config a send carries. A config is stored in
//! its task's context (the engine's `set_push_config` and the rest) before
//! the call answers; its delivery is `delivery.rs`'s.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::A2aError;
use crate::push::delivery::spawn;
use crate::state::Shared;
use crate::webhook::{Authentication, Stored, Target};

/// `TaskPushNotificationConfig` as a client sends it.
#[derive(Debug, Clone, Deserialize)]
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
    /// A v0.3 client's: its deliveries are written in v0.3's form.
    #[serde(skip)]
    pub(crate) v03: bool,
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
    #[serde(default, deserialize_with = "crate::http::protonames::int")]
    pub(crate) page_size: Option<i64>,
    #[serde(default)]
    pub(crate) page_token: Option<String>,
    #[serde(default, rename = "tenant")]
    _tenant: Option<Value>,
}

impl ConfigIn {
    /// The config, as a v0.3 client's when `v03` (its deliveries then go
    /// in v0.3's form).
    pub(crate) fn by_v03_client(mut self, v03: bool) -> Self {
        self.v03 = v03;
        self
    }
}

impl ConfigRef {
    /// A reference to the task's configs (all of them, in one page).
    pub(crate) fn task(task_id: String) -> Self {
        ConfigRef {
            task_id,
            id: None,
            page_size: None,
            page_token: None,
            _tenant: None,
        }
    }
}

/// The config checked: its id (the task's id when it names none, as
/// a2a-sdk does), and what the store keeps.
struct Checked {
    id: String,
    json: Vec<u8>,
}

/// Push notifications are served (`--push`); the methods' callers check
/// it first, so that it is the answer whatever else a request holds.
pub(crate) fn enabled(shared: &Shared) -> Result<(), A2aError> {
    match shared.config.push.enabled {
        true => Ok(()),
        false => Err(A2aError::PushNotificationNotSupported),
    }
}

/// Checks a config before anything is stored: a URL a delivery may go to,
/// header-safe token and credentials.
fn check(shared: &Shared, config: &ConfigIn, task_id: &str) -> Result<Checked, A2aError> {
    if let Some(named) = config
        .task_id
        .as_deref()
        .filter(|t| !t.is_empty() && *t != task_id)
    {
        return Err(A2aError::invalid(format!(
            "taskId: the config names task {named:?} but is given for task {task_id:?}"
        )));
    }
    let url = config
        .url
        .clone()
        .filter(|u| !u.is_empty())
        .ok_or_else(|| {
            A2aError::invalid("url: a push notification config needs the webhook's URL")
        })?;
    Target::parse(&url, shared.config.push.allow_private).map_err(A2aError::invalid)?;
    let stored = Stored {
        url,
        token: config.token.clone().filter(|t| !t.is_empty()),
        authentication: config.authentication.clone(),
        protocol: config.v03.then(|| "0.3".to_string()),
    };
    stored.headers().map_err(A2aError::invalid)?;
    let id = config
        .id
        .clone()
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| task_id.to_string());
    let json = serde_json::to_vec(&stored)
        .map_err(|e| A2aError::Internal(format!("the config could not be written: {e}")))?;
    Ok(Checked { id, json })
}

fn answer(task_id: &str, config: ctxlog::PushConfig) -> Result<ConfigOut, A2aError> {
    let mut stored: Stored = serde_json::from_slice(&config.config)
        .map_err(|_| A2aError::Internal("a stored push config could not be read".into()))?;
    stored.protocol = None;
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
    let task_id = task_id
        .filter(|t| !t.is_empty())
        .or_else(|| config.task_id.clone())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| A2aError::invalid("taskId: name the task the config is for"))?;
    let checked = check(shared, &config, &task_id)?;
    let stored = set(shared, tenant, &task_id, checked, None).await?;
    answer(&task_id, stored)
}

/// Stores a checked config and starts its delivery; returns it as stored.
/// `after`: a send's config, delivered after the send's message (its
/// task may be a direct reply's, which no client call may name); `None`:
/// a create's, delivered after the task's events so far.
async fn set(
    shared: &Arc<Shared>,
    tenant: &str,
    task_id: &str,
    checked: Checked,
    after: Option<u64>,
) -> Result<ctxlog::PushConfig, A2aError> {
    let (t, id, config_id) = (tenant.to_string(), task_id.to_string(), checked.id.clone());
    let (stored, fresh) = shared
        .store
        .blocking(move |store| {
            if after.is_none() {
                refuse_direct_reply(store, &t, &id)?;
            } else {
                // A resent send with its config: the one stored stands.
                let same = store
                    .push_configs(&t, &id)?
                    .into_iter()
                    .find(|c| c.config_id == config_id && c.config == checked.json);
                if let Some(same) = same {
                    return Ok((same, false));
                }
            }
            let stored = store.set_push_config(&t, &id, &config_id, &checked.json, after)?;
            Ok((stored, true))
        })
        .await?;
    let key = (
        tenant.to_string(),
        task_id.to_string(),
        stored.config_id.clone(),
    );
    // The delivery under way for a config that stands goes on from where
    // it got (one started again would resend what it has not yet written
    // down as delivered).
    if !fresh && shared.pushes.running(&key) {
        return Ok(stored);
    }
    spawn(
        shared,
        tenant,
        task_id,
        &stored.config_id,
        Some(stored.clone()),
    );
    Ok(stored)
}

/// A config given with `SendMessage`, checked before its message is
/// received: stored with the message when that is new
/// ([`ctxlog::Store::receive_with_push`]), or by [`set_inline`].
#[derive(Debug, Clone)]
pub(crate) struct Inline {
    /// The id it names; `None`: the task's.
    id: Option<String>,
    json: Vec<u8>,
}

impl Inline {
    /// The config as the engine takes it with a message.
    pub(crate) fn with_message(&self) -> ctxlog::InlinePush<'_> {
        ctxlog::InlinePush {
            config_id: self.id.as_deref(),
            config: &self.json,
        }
    }
}

/// A config given with `SendMessage` (by a v0.3 client when `v03`), read
/// and checked before the message is received (a bad one stores nothing);
/// `None` for none.
pub(crate) fn check_inline(
    shared: &Shared,
    config: Option<&Value>,
    v03: bool,
) -> Result<Option<Inline>, A2aError> {
    let Some(config) = config.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    enabled(shared)?;
    let mut parsed = ConfigIn::deserialize(config)
        .map_err(|e| A2aError::invalid(format!("taskPushNotificationConfig: {e}")))?
        .by_v03_client(v03);
    // The task is not known yet (and the spec has the client leave its
    // id empty here).
    parsed.task_id = None;
    let checked = check(shared, &parsed, "")?;
    if let Some(id) = parsed.id.as_deref() {
        if id.len() > ctxlog::MAX_PUSH_CONFIG_ID {
            return Err(A2aError::invalid(format!(
                "id: a push notification config id is at most {} bytes",
                ctxlog::MAX_PUSH_CONFIG_ID
            )));
        }
    }
    Ok(Some(Inline {
        id: parsed.id.filter(|i| !i.is_empty()),
        json: checked.json,
    }))
}

/// Delivers a config given with `SendMessage` to the task its message
/// went to: the config `stored` with the message, or (a resent message,
/// which stored none) `config` stored now, delivered from the first event
/// after the message.
pub(crate) async fn set_inline(
    shared: &Arc<Shared>,
    tenant: &str,
    receipt: &ctxlog::Receipt,
    config: &Inline,
    stored: Option<ctxlog::PushConfig>,
) -> Result<(), A2aError> {
    let task_id = &receipt.task_id;
    if let Some(stored) = stored {
        spawn(
            shared,
            tenant,
            task_id,
            &stored.config_id,
            Some(stored.clone()),
        );
        return Ok(());
    }
    let checked = Checked {
        id: config.id.clone().unwrap_or_else(|| task_id.clone()),
        json: config.json.clone(),
    };
    set(shared, tenant, task_id, checked, Some(receipt.event)).await?;
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
    let size = match params.page_size {
        Some(n) if n < 0 => return Err(A2aError::invalid("pageSize: send 0 or more")),
        // 0 or none: every config that is left.
        Some(n) if n > 0 => usize::try_from(n).unwrap_or(usize::MAX),
        _ => usize::MAX,
    };
    // The token is the last config id of the page before, in hex; configs
    // come in the order they were made, and a page starts after it.
    let all = configs(shared, tenant, &params.task_id).await?;
    let start = match params.page_token.as_deref().filter(|t| !t.is_empty()) {
        Some(token) => {
            let last = hex::decode(token)
                .ok()
                .and_then(|id| String::from_utf8(id).ok());
            let at = last.and_then(|id| all.iter().position(|c| c.config_id == id));
            at.map(|i| i + 1).ok_or_else(|| {
                A2aError::invalid(
                    "pageToken: not a token of this task's configs (or its page's last \
                     config was deleted since); list from the first page",
                )
            })?
        }
        None => 0,
    };
    let mut rest = all.into_iter().skip(start).peekable();
    let page: Vec<_> = rest.by_ref().take(size).collect();
    let next_page_token = match (rest.peek(), page.last()) {
        (Some(_), Some(last)) => hex::encode(&last.config_id),
        _ => String::new(),
    };
    let configs = page
        .into_iter()
        .map(|c| answer(&params.task_id, c))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ConfigList {
        configs,
        next_page_token,
    })
}

/// `DeleteTaskPushNotificationConfig`: idempotent; its delivery stops.
pub(crate) async fn delete(
    shared: &Arc<Shared>,
    tenant: &str,
    task_id: &str,
    id: Option<String>,
) -> Result<Value, A2aError> {
    let id = id
        .filter(|i| !i.is_empty())
        .ok_or_else(|| A2aError::invalid("id: name the push notification config to delete"))?;
    let config = id.clone();
    on_visible(shared, tenant, task_id, move |store, t, task| {
        store.delete_push_config(t, task, &config)
    })
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
    on_visible(shared, tenant, task_id, |store, t, id| {
        store.push_configs(t, id)
    })
    .await
}

/// Runs `f` (given the tenant and the task id) on the store, in one call
/// to the blocking pool, if the task is one the client may name.
async fn on_visible<T: Send + 'static>(
    shared: &Shared,
    tenant: &str,
    task_id: &str,
    f: impl FnOnce(&ctxlog::Store, &str, &str) -> ctxlog::Result<T> + Send + 'static,
) -> Result<T, A2aError> {
    let (t, id) = (tenant.to_string(), task_id.to_string());
    shared
        .store
        .blocking(move |store| {
            refuse_direct_reply(store, &t, &id)?;
            f(store, &t, &id)
        })
        .await
}

/// A direct reply's task is none a client may name: `TaskNotFound`.
fn refuse_direct_reply(store: &ctxlog::Store, tenant: &str, task_id: &str) -> ctxlog::Result<()> {
    match store.task_progress(tenant, task_id)?.direct_reply {
        true => Err(ctxlog::Error::TaskNotFound),
        false => Ok(()),
    }
}
