//! `ctxlog._native`: the engine's store for Python, behind the `ctxlog`
//! package (python/ctxlog), which parses the JSON these calls return.
//!
//! Every call that touches the disk or waits on a lock runs with the GIL
//! released, so an agent's threads use the store in parallel; the store is
//! shared between threads as it is in Rust. A2A objects cross as JSON text,
//! the stored bytes exactly as they were stored.

use std::path::PathBuf;
use std::sync::RwLock;

use ctxlog::a2a::{StreamResponse, TaskState};
use ctxlog::render::Budget;
use ctxlog::time::iso8601_ms;
use ctxlog::{Durability, ListTasksQuery, Options, RecoveryMode, Store as Engine};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyModule, PyString, PyType};

/// The exception of an engine error: the class of its kind, defined in
/// Python (`ctxlog._errors`, so that it belongs to the `ctxlog` module and
/// pickles), looked up by name.
fn exception(py: Python<'_>, e: ctxlog::Error) -> PyErr {
    error_class(py, e.kind_name()).map_or_else(
        |lookup| lookup,
        |class| PyErr::from_type(class, e.to_string()),
    )
}

/// `ctxlog.Error`, or its subclass `kind`.
fn error_class<'py>(py: Python<'py>, kind: &str) -> PyResult<Bound<'py, PyType>> {
    static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let errors = ERRORS
        .get_or_try_init(py, || {
            PyModule::import(py, "ctxlog._errors").map(Bound::unbind)
        })?
        .bind(py);
    let class = match errors.getattr(kind) {
        Ok(class) => class,
        // A kind this Python code does not know yet: its base.
        Err(_) => errors.getattr("Error")?,
    };
    Ok(class.cast_into::<PyType>()?)
}

/// An error of ctxlog that is not the engine's (the store is closed).
fn error(py: Python<'_>, text: &str) -> PyErr {
    error_class(py, "Error").map_or_else(
        |lookup| lookup,
        |class| PyErr::from_type(class, text.to_string()),
    )
}

fn json<T: serde::Serialize>(value: &T) -> PyResult<String> {
    serde_json::to_string(value)
        .map_err(|e| PyValueError::new_err(format!("could not write JSON: {e}")))
}

/// Bytes given as `bytes` or `str` (UTF-8), copied so the call can run
/// without the GIL.
fn bytes_of(value: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    if let Ok(b) = value.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(s.to_str()?.as_bytes().to_vec());
    }
    Err(PyTypeError::new_err(format!("{what} must be bytes or str")))
}

fn state_of(name: &str) -> PyResult<TaskState> {
    serde_json::from_value(serde_json::Value::String(name.to_string())).map_err(|_| {
        PyValueError::new_err(format!(
            "{name:?} is not a task state; write TASK_STATE_WORKING and the like"
        ))
    })
}

/// A ctxlog store: a directory on disk, opened by one process at a time
/// (others read it with `read_only=True`).
#[pyclass(frozen, module = "ctxlog._native")]
struct Store {
    /// `None` once closed.
    inner: RwLock<Option<Engine>>,
    path: PathBuf,
}

impl Store {
    /// Runs `f` on the open store without the GIL.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Engine) -> ctxlog::Result<T> + Send,
    ) -> PyResult<T> {
        let result = py.detach(|| {
            let guard = self.inner.read().unwrap_or_else(|e| e.into_inner());
            guard.as_ref().map(f)
        });
        match result {
            Some(result) => result.map_err(|e| exception(py, e)),
            None => Err(error(
                py,
                "the store is closed; open it again with ctxlog.Store(path)",
            )),
        }
    }
}

#[pymethods]
impl Store {
    #[new]
    #[pyo3(signature = (path, *, durability = "sync", create = true, read_only = false, recovery = "strict", retention_seconds = None, lock_wait_seconds = 0.5))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        durability: &str,
        create: bool,
        read_only: bool,
        recovery: &str,
        retention_seconds: Option<f64>,
        lock_wait_seconds: f64,
    ) -> PyResult<Self> {
        let durability = match durability {
            "sync" => Durability::Sync,
            "group" => Durability::GroupCommit,
            "buffered" => Durability::Buffered,
            other => {
                return Err(PyValueError::new_err(format!(
                    "durability {other:?}: write \"sync\", \"group\" or \"buffered\""
                )))
            }
        };
        let recovery = match recovery {
            "strict" => RecoveryMode::Strict,
            "skip-corrupt" => RecoveryMode::SkipCorrupt,
            other => {
                return Err(PyValueError::new_err(format!(
                    "recovery {other:?}: write \"strict\" or \"skip-corrupt\""
                )))
            }
        };
        let retention = match retention_seconds {
            Some(s) if !(s.is_finite() && s > 0.0) => {
                return Err(PyValueError::new_err(
                    "retention_seconds must be a positive number",
                ))
            }
            s => s.map(std::time::Duration::from_secs_f64),
        };
        if !(lock_wait_seconds.is_finite() && lock_wait_seconds >= 0.0) {
            return Err(PyValueError::new_err(
                "lock_wait_seconds must be a number of seconds, 0 or more",
            ));
        }
        let options = Options::default()
            .durability(durability)
            .recovery(recovery)
            .retention(retention)
            .lock_wait(std::time::Duration::from_secs_f64(lock_wait_seconds))
            .create(create);
        let dir = path.clone();
        let store = py
            .detach(move || match read_only {
                true => Engine::open_read_only(&dir, options),
                false => Engine::open(&dir, options),
            })
            .map_err(|e| exception(py, e))?;
        Ok(Store {
            inner: RwLock::new(Some(store)),
            path,
        })
    }

    /// Closes the store: a checkpoint, the last sync, the lock released.
    /// Later calls raise `Error`; closing again does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| {
            let store = self.inner.write().unwrap_or_else(|e| e.into_inner()).take();
            store.map_or(Ok(()), Engine::close)
        })
        .map_err(|e| exception(py, e))
    }

    /// Whether the store is closed.
    #[getter]
    fn closed(&self) -> bool {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// The store's directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    #[pyo3(signature = (tenant, message, message_ids = "idempotent"))]
    fn receive_message(
        &self,
        py: Python<'_>,
        tenant: &str,
        message: &Bound<'_, PyAny>,
        message_ids: &str,
    ) -> PyResult<String> {
        let raw = bytes_of(message, "message")?;
        let ids = match message_ids {
            "idempotent" => ctxlog::MessageIds::Idempotent,
            "labels" => ctxlog::MessageIds::Labels,
            other => {
                return Err(PyValueError::new_err(format!(
                    "message_ids must be \"idempotent\" or \"labels\", not {other:?}"
                )))
            }
        };
        let r = self.with(py, |s| s.receive_message_with(tenant, &raw, ids))?;
        json(&serde_json::json!({
            "contextId": r.context_id, "taskId": r.task_id, "seq": r.seq,
            "duplicate": r.duplicate, "newContext": r.new_context, "newTask": r.new_task,
            "event": r.event,
        }))
    }

    fn apply_event(
        &self,
        py: Python<'_>,
        tenant: &str,
        event: &Bound<'_, PyAny>,
    ) -> PyResult<(String, u64)> {
        let raw = bytes_of(event, "event")?;
        let e = self.with(py, |s| s.apply_event(tenant, &raw))?;
        Ok((e.task_id, e.seq))
    }

    fn cancel_task(&self, py: Python<'_>, tenant: &str, task_id: &str) -> PyResult<String> {
        json(&self.with(py, |s| s.cancel_task(tenant, task_id))?)
    }

    #[pyo3(signature = (tenant, task_id, history_length = None, include_artifacts = true))]
    fn get_task(
        &self,
        py: Python<'_>,
        tenant: &str,
        task_id: &str,
        history_length: Option<usize>,
        include_artifacts: bool,
    ) -> PyResult<String> {
        json(&self.with(py, |s| {
            s.get_task(tenant, task_id, history_length, include_artifacts)
        })?)
    }

    #[pyo3(signature = (tenant, context_id = None, status = None, status_timestamp_after_ms = None, page_size = None, page_token = None, history_length = None, include_artifacts = false))]
    #[allow(clippy::too_many_arguments)]
    fn list_tasks(
        &self,
        py: Python<'_>,
        tenant: &str,
        context_id: Option<String>,
        status: Option<&str>,
        status_timestamp_after_ms: Option<u64>,
        page_size: Option<usize>,
        page_token: Option<String>,
        history_length: Option<usize>,
        include_artifacts: bool,
    ) -> PyResult<String> {
        let query = ListTasksQuery {
            context_id,
            status: status.map(state_of).transpose()?,
            status_timestamp_after_ms,
            page_size,
            page_token,
            history_length,
            include_artifacts,
        };
        json(&self.with(py, |s| s.list_tasks(tenant, &query))?)
    }

    #[pyo3(signature = (tenant, task_id, after = 0))]
    fn events_since(
        &self,
        py: Python<'_>,
        tenant: &str,
        task_id: &str,
        after: u64,
    ) -> PyResult<String> {
        #[derive(serde::Serialize)]
        struct Numbered {
            seq: u64,
            #[serde(flatten)]
            event: StreamResponse,
        }
        let events = self.with(py, |s| s.events_since(tenant, task_id, after))?;
        let out: Vec<Numbered> = events
            .into_iter()
            .map(|(seq, event)| Numbered { seq, event })
            .collect();
        json(&out)
    }

    fn append_message(
        &self,
        py: Python<'_>,
        tenant: &str,
        context_id: &str,
        raw: &Bound<'_, PyAny>,
    ) -> PyResult<(u64, u64)> {
        let raw = bytes_of(raw, "raw")?;
        let a = self.with(py, |s| s.append_message(tenant, context_id, &raw))?;
        Ok((a.seq, a.timestamp_ms))
    }

    /// Appends each of `raws` as a message, one sync for all; returns
    /// (seq, timestamp in ms) of each.
    fn append_messages(
        &self,
        py: Python<'_>,
        tenant: &str,
        context_id: &str,
        raws: Vec<Bound<'_, PyAny>>,
    ) -> PyResult<Vec<(u64, u64)>> {
        let raws = raws
            .iter()
            .map(|raw| bytes_of(raw, "each item"))
            .collect::<PyResult<Vec<_>>>()?;
        let appended = self.with(py, |s| s.append_messages(tenant, context_id, &raws))?;
        Ok(appended.iter().map(|a| (a.seq, a.timestamp_ms)).collect())
    }

    /// Takes the newest message out of the history: (seq, timestamp in ms,
    /// bytes), or `None`.
    fn pop_message<'py>(
        &self,
        py: Python<'py>,
        tenant: &str,
        context_id: &str,
    ) -> PyResult<Option<(u64, u64, Bound<'py, PyBytes>)>> {
        let popped = self.with(py, |s| s.pop_message(tenant, context_id))?;
        Ok(popped.map(|m| (m.seq, m.timestamp_ms, PyBytes::new(py, &m.raw))))
    }

    /// Takes every message out of the history; returns how many.
    fn empty_context(&self, py: Python<'_>, tenant: &str, context_id: &str) -> PyResult<u64> {
        self.with(py, |s| s.empty_context(tenant, context_id))
    }

    /// The context's last `n` messages below seq `before`, oldest first,
    /// as (seq, timestamp in ms, bytes): the first `head` bytes of each.
    #[pyo3(signature = (tenant, context_id, n = None, before = None, head = None))]
    fn last_messages<'py>(
        &self,
        py: Python<'py>,
        tenant: &str,
        context_id: &str,
        n: Option<usize>,
        before: Option<u64>,
        head: Option<usize>,
    ) -> PyResult<Vec<(u64, u64, Bound<'py, PyBytes>)>> {
        // Read into one buffer, then one copy of each message into its
        // Python bytes.
        let mut buf = ctxlog::MessageBuf::new();
        self.with(py, |s| {
            let n = n.unwrap_or(usize::MAX);
            s.messages_before_into(tenant, context_id, before, n, head, &mut buf)
        })?;
        Ok(buf
            .iter()
            .map(|m| (m.seq, m.timestamp_ms, PyBytes::new(py, m.raw)))
            .collect())
    }

    #[pyo3(signature = (tenant, context_id, before = None, max_bytes = 16384, max_messages = 50, include_artifacts = false))]
    #[allow(clippy::too_many_arguments)]
    fn render_history(
        &self,
        py: Python<'_>,
        tenant: &str,
        context_id: &str,
        before: Option<u64>,
        max_bytes: usize,
        max_messages: usize,
        include_artifacts: bool,
    ) -> PyResult<String> {
        let budget = Budget::new(max_bytes, max_messages);
        let budget = if include_artifacts {
            budget.with_artifacts()
        } else {
            budget
        };
        Ok(self
            .with(py, |s| s.render_history(tenant, context_id, before, budget))?
            .text)
    }

    #[pyo3(signature = (tenant, page_size = 50, page_token = None))]
    fn list_contexts(
        &self,
        py: Python<'_>,
        tenant: &str,
        page_size: usize,
        page_token: Option<String>,
    ) -> PyResult<String> {
        // The CLI's form (`ctxlog contexts`): ISO 8601 times, and "" for
        // the token of the last page (taken back as no token).
        let token = page_token.filter(|t| !t.is_empty());
        let page = self.with(py, |s| s.list_contexts(tenant, page_size, token.as_deref()))?;
        let contexts: Vec<serde_json::Value> = page
            .contexts
            .iter()
            .map(|c| {
                serde_json::json!({
                    "contextId": c.context_id, "key": c.key.to_string(),
                    "firstActivity": iso8601_ms(c.first_activity_ms),
                    "lastActivity": iso8601_ms(c.last_activity_ms),
                    "messages": c.messages, "tasks": c.tasks,
                })
            })
            .collect();
        let next = page.next_page_token.unwrap_or_default();
        json(&serde_json::json!({ "contexts": contexts, "nextPageToken": next }))
    }

    fn delete_context(&self, py: Python<'_>, tenant: &str, context_id: &str) -> PyResult<()> {
        self.with(py, |s| s.delete_context(tenant, context_id))
    }

    fn stats(&self, py: Python<'_>) -> PyResult<String> {
        json(&self.with(py, |s| Ok(s.stats()))?)
    }

    fn open_report(&self, py: Python<'_>) -> PyResult<String> {
        json(&self.with(py, |s| Ok(s.open_report().clone()))?)
    }

    fn compact(&self, py: Python<'_>) -> PyResult<String> {
        json(&self.with(py, Engine::compact)?)
    }

    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, Engine::sync)
    }
}

/// A full checksum scan of the store at `path` that changes nothing (the
/// store must not be open for writing elsewhere, unless `read_only`).
#[pyfunction]
#[pyo3(signature = (path, read_only = false))]
fn verify(py: Python<'_>, path: PathBuf, read_only: bool) -> PyResult<String> {
    let report = py
        .detach(|| match read_only {
            true => Engine::verify_read_only(&path, &mut |_, _| {}),
            false => Engine::verify(&path, &mut |_, _| {}),
        })
        .map_err(|e| exception(py, e))?;
    json(&report)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Store>()?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("MAX_RECORD_BYTES", ctxlog::MAX_RECORD_BYTES)?;
    Ok(())
}
