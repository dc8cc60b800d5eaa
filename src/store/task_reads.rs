//! Reading tasks: one task, its progress, listings, and its events in
//! pages for streams and waiters.

use super::tasks::{
    context_of, decode_task_token, encode_task_token, from_json, read_artifact, read_json,
    stored_message, ListTasksQuery, TaskProgress, TaskRef,
};
use super::{check_page_size, now_ms, Store};
use crate::a2a::{
    DamagedTask, ListTasksResponse, Message, Stored, StreamResponse, Task, TaskArtifactUpdateEvent,
    TaskState, TaskStatus, TaskStatusUpdateEvent,
};
use crate::error::{Error, Result};
use crate::index::context::TaskView;
use crate::index::Life;
use crate::log::record::{RecordKind, ViewKind};
use crate::log::segments::RecordLoc;
use crate::namespace::ContextKey;
use crate::time::iso8601_ms;

/// A context as its records are read: its key (every record read must name
/// it) and its id (for the objects built around the records).
#[derive(Clone, Copy)]
struct Place<'a> {
    key: &'a ContextKey,
    context_id: &'a str,
}

impl Store {
    /// A task, with the last `history_length` messages of its history (unset:
    /// all; 0: none) and, if asked, its artifacts. Reads only what it returns.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// // The last 10 messages, no artifacts.
    /// let task = store.get_task("acme", &r.task_id, Some(10), false)?;
    /// assert_eq!((task.id.as_str(), task.history.len()), (r.task_id.as_str(), 1));
    /// // Another tenant's task answers as a missing one.
    /// assert!(matches!(
    ///     store.get_task("other", &r.task_id, None, false),
    ///     Err(ctxlog::Error::TaskNotFound)
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get_task(
        &self,
        tenant: &str,
        task_id: &str,
        history_length: Option<usize>,
        include_artifacts: bool,
    ) -> Result<Task> {
        self.task_snapshot(tenant, task_id, history_length, include_artifacts)
            .map(|(task, _)| task)
    }

    /// A task as [`get_task`](Self::get_task) returns it, with the number
    /// of its events so far, read together: the events after that number
    /// ([`events_since`](Self::events_since)) are exactly those the
    /// snapshot does not reflect (for a subscriber that starts from it).
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// let (task, events) = store.task_snapshot("acme", &r.task_id, Some(0), false)?;
    /// assert_eq!(events, 1);
    /// // A subscriber that starts from the snapshot goes on after `events`.
    /// assert!(store.events_since("acme", &task.id, events)?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn task_snapshot(
        &self,
        tenant: &str,
        task_id: &str,
        history_length: Option<usize>,
        include_artifacts: bool,
    ) -> Result<(Task, u64)> {
        self.with_task(tenant, task_id, |at, task| {
            let events = task.event_count() as u64;
            Ok((
                self.read_task(at, task, history_length, include_artifacts)?,
                events,
            ))
        })
    }

    /// Runs `read` on the task and its place, under its context's read
    /// lock, so a compaction cannot move its records in between (it remaps
    /// under the write lock).
    fn with_task<R>(
        &self,
        tenant: &str,
        task_id: &str,
        read: impl FnOnce(Place<'_>, TaskView<'_>) -> Result<R>,
    ) -> Result<R> {
        let slot = self.task_slot(tenant, task_id)?;
        let state = slot.state.read();
        let task = state.task(task_id).ok_or(Error::TaskNotFound)?;
        let at = Place {
            key: &slot.key,
            context_id: context_of(&state)?,
        };
        read(at, task)
    }

    /// The task's state and how many events it has, from memory (no record
    /// is read): what a stream checks before it reads events it may
    /// already have.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::a2a::TaskState;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// let progress = store.task_progress("acme", &r.task_id)?;
    /// assert_eq!((progress.state, progress.events), (TaskState::Submitted, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn task_progress(&self, tenant: &str, task_id: &str) -> Result<TaskProgress> {
        let slot = self.task_slot(tenant, task_id)?;
        let state = slot.state.read();
        let task = state.task(task_id).ok_or(Error::TaskNotFound)?;
        Ok(TaskProgress {
            state: task.state(),
            events: task.event_count() as u64,
            direct_reply: task.is_direct_reply(),
        })
    }

    /// The latest message a client sent into the task (a received message,
    /// not an agent's status message), with its seq in its context: what a
    /// turn interrupted by a crash was processing, and where its history
    /// ends (`render_history(.., before: Some(seq), ..)`).
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// let (seq, message) = store.latest_received("acme", &r.task_id)?.unwrap();
    /// assert_eq!((seq, message.message_id.as_str()), (r.seq, "m1"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn latest_received(
        &self,
        tenant: &str,
        task_id: &str,
    ) -> Result<Option<(u64, Stored<Message>)>> {
        let slot = self.task_slot(tenant, task_id)?;
        let state = slot.state.read();
        let task = state.task(task_id).ok_or(Error::TaskNotFound)?;
        for loc in task.history_newest() {
            let found = self.with_record(&slot.key, loc, |body, blob| match body.kind {
                RecordKind::Message { .. } => Some((body.seq, stored_message(blob))),
                _ => None,
            })?;
            if let Some((seq, message)) = found {
                let message =
                    message.map_err(|e| Error::corrupt(loc.segment, u64::from(loc.offset), e))?;
                return Ok(Some((seq, message)));
            }
        }
        Ok(None)
    }

    /// What a turn starts from, in one read: the task as
    /// [`get_task`](Self::get_task) returns it with its whole history and
    /// its artifacts, and what [`latest_received`](Self::latest_received)
    /// returns (the message taken from that history, not read again).
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// let (task, latest) = store.task_and_latest_received("acme", &r.task_id)?;
    /// let (seq, message) = latest.unwrap();
    /// assert_eq!((seq, message.message_id.as_str()), (r.seq, "m1"));
    /// assert_eq!(task.history.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    // Spelled out, as `latest_received` does, rather than an alias the
    // docs would show as a bare name.
    #[allow(clippy::type_complexity)]
    pub fn task_and_latest_received(
        &self,
        tenant: &str,
        task_id: &str,
    ) -> Result<(Task, Option<(u64, Stored<Message>)>)> {
        let (task, newest) = self.with_task(tenant, task_id, |at, view| {
            self.read_task_noting(at, view, None, true)
        })?;
        let latest = newest.and_then(|(seq, i)| Some((seq, task.history.get(i)?.clone())));
        Ok((task, latest))
    }

    /// Every live task, of every tenant, whose state is one of `states`
    /// (for a server that resolves, on start, the turns a crash left
    /// running).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::a2a::TaskState;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// // After a crash: the tasks whose turn was running.
    /// let running = store.tasks_in(&[TaskState::Submitted, TaskState::Working]);
    /// assert_eq!(running[0].task_id, r.task_id);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tasks_in(&self, states: &[TaskState]) -> Vec<TaskRef> {
        let now = now_ms();
        let mut found = Vec::new();
        for slot in self.index.all_slots() {
            let state = slot.state.read();
            if state.life(now, self.options.retention) != Life::Live {
                continue;
            }
            let Some(meta) = &state.meta else { continue };
            found.extend(
                state
                    .tasks()
                    .filter(|t| states.contains(&t.state()))
                    .map(|t| TaskRef {
                        tenant: meta.tenant().to_string(),
                        context_id: meta.context_id().to_string(),
                        task_id: t.id().to_string(),
                        state: t.state(),
                    }),
            );
        }
        found
    }

    /// The tenant's tasks, filtered, newest status first (ties by id), in
    /// pages with cursor tokens. See [`ListTasksQuery`]. A task whose turn
    /// ended in a direct reply is never listed (the client got a message,
    /// not a task).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::a2a::TaskState;
    /// use ctxlog::ListTasksQuery;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// for id in ["m1", "m2", "m3"] {
    ///     let raw = format!(r#"{{"messageId":"{id}","role":"ROLE_USER","parts":[{{"text":"hi"}}]}}"#);
    ///     store.receive_message("acme", raw.as_bytes())?;
    /// }
    /// let query = ListTasksQuery {
    ///     status: Some(TaskState::Submitted),
    ///     page_size: Some(2),
    ///     ..Default::default()
    /// };
    /// let page = store.list_tasks("acme", &query)?;
    /// assert_eq!((page.tasks.len(), page.total_size), (2, 3));
    /// let next = ListTasksQuery { page_token: Some(page.next_page_token), ..query };
    /// let last = store.list_tasks("acme", &next)?;
    /// assert_eq!((last.tasks.len(), last.next_page_token.as_str()), (1, ""));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn list_tasks(&self, tenant: &str, query: &ListTasksQuery) -> Result<ListTasksResponse> {
        let page_size = query.page_size.unwrap_or(super::DEFAULT_PAGE_SIZE);
        check_page_size(page_size, "pageSize")?;
        let after = query
            .page_token
            .as_deref()
            .map(decode_task_token)
            .transpose()?;
        // (status time, task id, its context's place in `slots`)
        let mut found: Vec<(u64, String, usize)> = Vec::new();
        let now = now_ms();
        let slots = self.tenant_contexts(tenant, query.context_id.as_deref())?;
        for (place, slot) in slots.iter().enumerate() {
            let state = slot.state.read();
            if state.life(now, self.options.retention) != Life::Live {
                continue;
            }
            found.extend(
                state
                    .tasks()
                    // A direct reply's task was never the client's.
                    .filter(|t| !t.is_direct_reply())
                    .filter(|t| query.status.is_none_or(|s| s == t.state()))
                    .filter(|t| {
                        query
                            .status_timestamp_after_ms
                            .is_none_or(|a| t.status_ms() >= a)
                    })
                    .map(|t| (t.status_ms(), t.id().to_string(), place)),
            );
        }
        found.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let total_size = found.len();
        let start = after.map_or(0, |(ms, id)| {
            found.partition_point(|(m, i, _)| *m > ms || (*m == ms && *i <= id))
        });
        let page: Vec<_> = found.iter().skip(start).take(page_size).collect();
        let more = start + page.len() < total_size;
        let next_page_token = match page.last() {
            Some((ms, id, _)) if more => encode_task_token(*ms, id),
            _ => String::new(),
        };
        let mut tasks = Vec::with_capacity(page.len());
        let mut damaged = Vec::new();
        for (_, id, place) in page {
            let Some(slot) = slots.get(*place) else {
                continue;
            };
            let state = slot.state.read();
            let Some(task) = state.task(id) else { continue };
            let at = Place {
                key: &slot.key,
                context_id: context_of(&state)?,
            };
            match self.read_task(at, task, query.history_length, query.include_artifacts) {
                Ok(task) => tasks.push(task),
                // One unreadable task never hides the others: it is left
                // out of the page and reported beside it.
                Err(e @ Error::Corrupt { .. }) => damaged.push(DamagedTask {
                    task_id: id.clone(),
                    reason: e.to_string(),
                }),
                Err(e) => return Err(e),
            }
        }
        Ok(ListTasksResponse {
            tasks,
            next_page_token,
            page_size: page_size as u32,
            total_size: u32::try_from(total_size).unwrap_or(u32::MAX),
            damaged,
        })
    }

    /// The task's events after per-task sequence number `after` (0: all), in
    /// order, for a subscriber that reconnects.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::a2a::{TaskState, TaskStatus};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// store.update_status("acme", &r.status_update(TaskStatus::new(TaskState::Working)))?;
    /// let events = store.events_since("acme", &r.task_id, 1)?; // after the message
    /// assert_eq!(events.len(), 1);
    /// assert_eq!(events[0].0, 2);
    /// assert!(events[0].1.status_update.is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn events_since(
        &self,
        tenant: &str,
        task_id: &str,
        after: u64,
    ) -> Result<Vec<(u64, StreamResponse)>> {
        self.events_page(tenant, task_id, after, usize::MAX)
    }

    /// The first of the task's events after `after`, as
    /// [`events_since`](Self::events_since) gives them, up to about `bytes`
    /// of stored records (always one, if there is one): a page, for a
    /// reader that must bound what it holds (a stream to a slow client).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::a2a::{TaskState, TaskStatus};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// store.update_status("acme", &r.status_update(TaskStatus::new(TaskState::Working)))?;
    /// let page = store.events_page("acme", &r.task_id, 0, 1)?; // one record's worth
    /// assert_eq!(page.len(), 1);
    /// assert_eq!(store.events_page("acme", &r.task_id, 1, 1 << 20)?.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn events_page(
        &self,
        tenant: &str,
        task_id: &str,
        after: u64,
        bytes: usize,
    ) -> Result<Vec<(u64, StreamResponse)>> {
        self.page(tenant, task_id, after, bytes, true)
    }

    /// [`events_page`](Self::events_page) without the messages the client
    /// sent (the agent's status updates and artifact chunks only, with
    /// their numbers): what a stream sends, which passes over the client's
    /// own messages. Those are neither read nor counted in `bytes`.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::a2a::{TaskState, TaskStatus};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// store.update_status("acme", &r.status_update(TaskStatus::new(TaskState::Working)))?;
    /// let page = store.updates_page("acme", &r.task_id, 0, 1 << 20)?;
    /// assert_eq!(page.len(), 1);
    /// assert_eq!(page[0].0, 2); // the message, event 1, is passed over
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn updates_page(
        &self,
        tenant: &str,
        task_id: &str,
        after: u64,
        bytes: usize,
    ) -> Result<Vec<(u64, StreamResponse)>> {
        self.page(tenant, task_id, after, bytes, false)
    }

    fn page(
        &self,
        tenant: &str,
        task_id: &str,
        after: u64,
        bytes: usize,
        messages: bool,
    ) -> Result<Vec<(u64, StreamResponse)>> {
        let skip = usize::try_from(after).unwrap_or(usize::MAX);
        self.with_task(tenant, task_id, |at, task| {
            let mut taken = 0usize;
            task.events_with_kind()
                .into_iter()
                .enumerate()
                .skip(skip)
                .filter(|(_, (_, sent))| messages || !sent)
                .map(|(i, (loc, _))| (i, loc))
                .take_while(|(_, loc)| {
                    let first = taken == 0;
                    taken = taken.saturating_add(loc.len as usize);
                    first || taken <= bytes
                })
                .map(|(i, loc)| Ok((i as u64 + 1, self.read_event(at, loc, task_id)?)))
                .collect()
        })
    }

    /// The task's events after per-task sequence number `after`, as
    /// [`events_since`](Self::events_since) gives them, once there is at
    /// least one: waits (without polling) until another thread stores one
    /// or `timeout` passes, and then answers with whatever there is (empty
    /// on a timeout). A task with events past `after` already answers at
    /// once. For an async program, call it from a blocking thread
    /// (`tokio::task::spawn_blocking`).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use ctxlog::a2a::{TaskState, TaskStatus};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let r = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}"#)?;
    /// let store = Arc::new(store);
    /// let waiter = {
    ///     let (store, task) = (store.clone(), r.task_id.clone());
    ///     std::thread::spawn(move || store.wait_for_events("acme", &task, 1, Duration::from_secs(10)))
    /// };
    /// store.update_status("acme", &r.status_update(TaskStatus::new(TaskState::Working)))?;
    /// let events = waiter.join().unwrap()?;
    /// assert_eq!(events[0].0, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn wait_for_events(
        &self,
        tenant: &str,
        task_id: &str,
        after: u64,
        timeout: std::time::Duration,
    ) -> Result<Vec<(u64, StreamResponse)>> {
        let slot = self.task_slot(tenant, task_id)?;
        let now = std::time::Instant::now();
        // A timeout too far to add is as good as forever: a year.
        let deadline = now
            .checked_add(timeout)
            .unwrap_or(now + std::time::Duration::from_secs(365 * 86_400));
        let more = || -> Result<bool> {
            let state = slot.state.read();
            let task = state.task(task_id).ok_or(Error::TaskNotFound)?;
            Ok(task.event_count() as u64 > after)
        };
        match self.waits.wait(slot.number, deadline, more)? {
            true => self.events_since(tenant, task_id, after),
            false => Ok(Vec::new()),
        }
    }

    fn read_event(&self, at: Place<'_>, loc: RecordLoc, task_id: &str) -> Result<StreamResponse> {
        let bad = |e: String| Error::corrupt(loc.segment, u64::from(loc.offset), e);
        let context_id = at.context_id;
        let event = self.with_record(
            at.key,
            loc,
            |body, blob| -> std::result::Result<_, String> {
                let mut out = StreamResponse::default();
                match &body.kind {
                    // In whichever form it came (v0.3's read as v1.0's).
                    RecordKind::Message { .. } => out.message = Some(stored_message(blob)?),
                    RecordKind::Status { .. } => {
                        out.status_update = Some(TaskStatusUpdateEvent {
                            task_id: task_id.to_string(),
                            context_id: context_id.to_string(),
                            status: from_json(blob)?,
                            metadata: None,
                        })
                    }
                    RecordKind::Gone { .. } | RecordKind::Hide { .. } | RecordKind::Push { .. } => {
                        return Err("a task event points at a record of no task".into())
                    }
                    RecordKind::Artifact {
                        append, last_chunk, ..
                    } => {
                        out.artifact_update = Some(TaskArtifactUpdateEvent {
                            task_id: task_id.to_string(),
                            context_id: context_id.to_string(),
                            artifact: from_json(blob)?,
                            append: *append,
                            last_chunk: *last_chunk,
                            metadata: None,
                        })
                    }
                }
                Ok(out)
            },
        )?;
        event.map_err(bad)
    }

    /// A task as A2A shows it, read straight from its records (the caller
    /// holds the context's read lock): the latest status, the last
    /// `history_length` messages of its history, and, if asked, its artifacts.
    fn read_task(
        &self,
        at: Place<'_>,
        task: TaskView<'_>,
        history_length: Option<usize>,
        include_artifacts: bool,
    ) -> Result<Task> {
        self.read_task_noting(at, task, history_length, include_artifacts)
            .map(|(task, _)| task)
    }

    /// [`read_task`](Self::read_task), noting where in the history it read
    /// is the newest message a client sent (a received message, not an
    /// agent's status message), with its seq.
    fn read_task_noting(
        &self,
        at: Place<'_>,
        task: TaskView<'_>,
        history_length: Option<usize>,
        include_artifacts: bool,
    ) -> Result<(Task, Option<(u64, usize)>)> {
        // The task's records, read under one lock of the segment set.
        let mut records = self.context_records(at.key);
        // A task the client wrote to since its latest status reads as its
        // state says (SUBMITTED, or WORKING on the client's answer), not as
        // that status: its question is answered.
        let status = match task.status_record() {
            Some(loc) => read_json(&mut records, loc)?,
            None => Stored::new(TaskStatus {
                state: task.state(),
                message: None,
                timestamp: Some(iso8601_ms(task.status_ms())),
                extra: Default::default(),
            }),
        };
        // The newest `history_length` messages, walking back from the end.
        let mut newest_received = None;
        let mut history = task
            .history_newest()
            .take(history_length.unwrap_or(usize::MAX))
            .enumerate()
            .map(|(back, loc)| {
                records
                    .message(loc, |view, bytes| {
                        if let (None, ViewKind::Message { .. }) = (newest_received, view.kind) {
                            newest_received = Some((view.seq, back));
                        }
                        stored_message(bytes)
                    })?
                    .map_err(|e| Error::corrupt(loc.segment, u64::from(loc.offset), e))
            })
            .collect::<Result<Vec<_>>>()?;
        history.reverse();
        let newest_received = newest_received
            .and_then(|(seq, back)| Some((seq, history.len().checked_sub(back + 1)?)));
        let artifacts = include_artifacts
            .then(|| {
                task.artifacts()
                    .map(|chunks| read_artifact(&mut records, &chunks))
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?;
        let task = Task {
            id: task.id().to_string(),
            context_id: at.context_id.to_string(),
            status,
            artifacts,
            history,
            metadata: None,
        };
        Ok((task, newest_received))
    }
}
