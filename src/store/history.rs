//! Reading a context's history: its newest messages, the whole of it,
//! its rendering in turns, and the listing of a tenant's contexts.

use super::{
    bad_cursor, check_page_size, decode_cursor, encode_cursor, now_ms, ContextInfo, ContextPage,
    ContextRecords, Store, StoredMessage,
};
use crate::error::{Error, Result};
use crate::index::{ContextSlot, Life, MessageRef};
use crate::log::segments::RecordLoc;
use crate::namespace::ContextKey;
use crate::render::{self, Budget, History, Rendered, Turn};

/// One item of a context's history: a message, or (`chunks > 0`) an
/// artifact, at the place of its latest chunk.
#[derive(Debug, Clone, Copy)]
struct HistoryItem {
    seq: u64,
    loc: RecordLoc,
    chunks: u32,
}

impl HistoryItem {
    fn message(r: MessageRef) -> Self {
        HistoryItem {
            seq: r.seq(),
            loc: r.loc(),
            chunks: 0,
        }
    }
}

impl Store {
    /// The last `n` messages of a context, oldest first (`usize::MAX`: all).
    ///
    /// Reads only those records. [`last_messages_into`](Self::last_messages_into)
    /// reads them into a buffer the caller reuses, without an allocation per
    /// message. Another tenant's context answers exactly as
    /// a missing one: [`Error::ContextNotFound`].
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// for text in ["one", "two", "three"] {
    ///     store.append_message("acme", "case-42", text.as_bytes())?;
    /// }
    /// let last = store.last_messages("acme", "case-42", 2)?;
    /// assert_eq!((last[0].raw.as_slice(), last[1].raw.as_slice()), (&b"two"[..], &b"three"[..]));
    /// // Another tenant's context answers as a missing one.
    /// assert!(matches!(
    ///     store.last_messages("other", "case-42", 2),
    ///     Err(ctxlog::Error::ContextNotFound)
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn last_messages(
        &self,
        tenant: &str,
        context_id: &str,
        n: usize,
    ) -> Result<Vec<StoredMessage>> {
        self.with_newest_before(tenant, context_id, None, n, |records, refs, _| {
            let mut messages = Vec::with_capacity(refs.len());
            for r in refs {
                messages.push(records.message(r.loc(), |view, raw| StoredMessage {
                    seq: view.seq,
                    timestamp_ms: view.timestamp_ms,
                    raw: raw.to_vec(),
                })?);
            }
            Ok(messages)
        })
    }

    /// Hands `f` the context's records, up to `max` of the newest message
    /// refs before seq `before`, and how many messages lie before it. `f`
    /// runs under the context's read lock, so a compaction cannot move the
    /// records between the copy of their locations and their reads (it
    /// remaps under the write lock).
    pub(super) fn with_newest_before<T>(
        &self,
        tenant: &str,
        context_id: &str,
        before: Option<u64>,
        max: usize,
        f: impl FnOnce(&mut ContextRecords, &[MessageRef], u64) -> Result<T>,
    ) -> Result<T> {
        let slot = self.visible_slot(tenant, context_id)?;
        let state = slot.state.read();
        let (refs, total) = state.newest_before(before, max);
        let mut records = self.context_records(&slot.key);
        records.reading.prefetch(refs.iter().map(MessageRef::loc));
        f(&mut records, &refs, total)
    }

    /// Like [`with_newest_before`](Self::with_newest_before), for history
    /// items: the messages and, if `budget.include_artifacts`, one item per
    /// artifact at the place of its latest chunk, in the context's order.
    fn with_history<T>(
        &self,
        tenant: &str,
        context_id: &str,
        before: Option<u64>,
        budget: &Budget,
        f: impl FnOnce(&mut ContextRecords, &[HistoryItem], u64) -> Result<T>,
    ) -> Result<T> {
        let slot = self.visible_slot(tenant, context_id)?;
        let state = slot.state.read();
        // The newest `max` items hold at most the newest `max` messages, so
        // older messages are never copied, even with artifacts to merge in.
        let (refs, messages) = state.newest_before(before, budget.max_messages);
        let mut items: Vec<HistoryItem> = refs.iter().map(|r| HistoryItem::message(*r)).collect();
        let mut total = messages;
        if budget.include_artifacts {
            for (seq, loc, chunks) in state.latest_chunks() {
                if before.is_none_or(|b| seq < b) {
                    total += 1;
                    items.push(HistoryItem { seq, loc, chunks });
                }
            }
            items.sort_unstable_by_key(|i| i.seq);
            items.drain(..items.len().saturating_sub(budget.max_messages));
        }
        let mut records = self.context_records(&slot.key);
        records.reading.prefetch(items.iter().map(|i| i.loc));
        f(&mut records, &items, total)
    }

    /// The context's history before the message of seq `before` (the one
    /// being processed, which is never part of its own history; `None`: the
    /// whole history), in the structured form: role and text per turn, within
    /// `budget` (bytes of text, and messages). The oldest whole messages are
    /// dropped first; the newest is kept even when it alone is too large, cut
    /// from its start.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::render::{Budget, Role};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let m1 = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","contextId":"case-42","parts":[{"text":"Refund order 123"}]}"#)?;
    /// # let m2 = store.receive_message("acme", br#"{"messageId":"m2","role":"ROLE_USER","contextId":"case-42","parts":[{"text":"Any news?"}]}"#)?;
    /// // Two messages in context "case-42"; the turn processes the second (m2).
    /// let history = store.history("acme", "case-42", Some(m2.seq), Budget::default())?;
    /// assert_eq!(history.turns.len(), 1);
    /// assert_eq!(history.turns[0].role, Role::User);
    /// assert_eq!(history.turns[0].text, "Refund order 123");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn history(
        &self,
        tenant: &str,
        context_id: &str,
        before: Option<u64>,
        budget: Budget,
    ) -> Result<History> {
        budget.check()?;
        let (turns, omitted) = self.with_history(
            tenant,
            context_id,
            before,
            &budget,
            |records, refs, total| choose_turns(turns(records, refs), total, &budget),
        )?;
        Ok(History { turns, omitted })
    }

    /// The same history rendered for a prompt inside an injection-guard
    /// frame (see DESIGN.md): at most `budget.max_bytes` bytes in all.
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::render::{self, Budget};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let m1 = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","contextId":"case-42","parts":[{"text":"Refund order 123"}]}"#)?;
    /// # let m2 = store.receive_message("acme", br#"{"messageId":"m2","role":"ROLE_USER","contextId":"case-42","parts":[{"text":"Any news?"}]}"#)?;
    /// // Two messages in context "case-42"; the turn processes the second (m2).
    /// let framed = store.render_history("acme", "case-42", Some(m2.seq), Budget::default())?;
    /// assert!(framed.text.contains("| Refund order 123"));
    /// // The frame parses back: stored text can neither close it nor forge a turn.
    /// assert_eq!(render::parse(&framed.text)?.turns.len(), 1);
    /// // Before the context's first message there is nothing to show.
    /// assert!(store.render_history("acme", "case-42", Some(m1.seq), Budget::default())?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn render_history(
        &self,
        tenant: &str,
        context_id: &str,
        before: Option<u64>,
        budget: Budget,
    ) -> Result<Rendered> {
        budget.check()?;
        let nonce = render::new_nonce()?;
        self.with_history(
            tenant,
            context_id,
            before,
            &budget,
            |records, refs, total| rendered(turns(records, refs), total, &budget, &nonce),
        )
    }

    /// [`history`](Self::history) and [`render_history`](Self::render_history)
    /// of the same messages, each record read and parsed once for both: what
    /// an agent's turn is handed. Either answers as its own call would (the
    /// rendering with a nonce of its own).
    ///
    /// # Examples
    ///
    /// ```
    /// use ctxlog::render::Budget;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// # let m1 = store.receive_message("acme", br#"{"messageId":"m1","role":"ROLE_USER","contextId":"case-42","parts":[{"text":"Refund order 123"}]}"#)?;
    /// # let m2 = store.receive_message("acme", br#"{"messageId":"m2","role":"ROLE_USER","contextId":"case-42","parts":[{"text":"Any news?"}]}"#)?;
    /// let (history, rendered) =
    ///     store.history_and_rendering("acme", "case-42", Some(m2.seq), Budget::default())?;
    /// assert_eq!(history.turns[0].text, "Refund order 123");
    /// assert!(rendered.text.contains("Refund order 123"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn history_and_rendering(
        &self,
        tenant: &str,
        context_id: &str,
        before: Option<u64>,
        budget: Budget,
    ) -> Result<(History, Rendered)> {
        budget.check()?;
        let nonce = render::new_nonce()?;
        self.with_history(
            tenant,
            context_id,
            before,
            &budget,
            |records, refs, total| {
                let mut source = turns(records, refs);
                // The turns the structured choice reads are kept for the
                // rendering, which reads on from where that choice stopped.
                let mut read = Vec::new();
                let kept = source.by_ref().inspect(|turn| {
                    if let Ok(turn) = turn {
                        read.push(turn.clone());
                    }
                });
                let (turns, omitted) = choose_turns(kept, total, &budget)?;
                let again = read.into_iter().map(Ok).chain(source);
                let rendering = rendered(again, total, &budget, &nonce)?;
                Ok((History { turns, omitted }, rendering))
            },
        )
    }

    /// What the store knows of one context.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// store.append_message("acme", "case-42", b"hello")?;
    /// let info = store.context_info("acme", "case-42")?;
    /// assert_eq!((info.context_id.as_str(), info.messages), ("case-42", 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn context_info(&self, tenant: &str, context_id: &str) -> Result<ContextInfo> {
        let slot = self.visible_slot(tenant, context_id)?;
        info_of(&slot, self.options.retention).ok_or(Error::ContextNotFound)
    }

    /// One page of the tenant's contexts, oldest first activity first.
    ///
    /// `page_size` is 1 to [`MAX_PAGE_SIZE`](crate::MAX_PAGE_SIZE); `page_token` is `None` for the
    /// first page, then the previous page's `next_page_token`.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// for id in ["a", "b", "c"] {
    ///     store.append_message("acme", id, b"hello")?;
    /// }
    /// let first = store.list_contexts("acme", 2, None)?;
    /// assert_eq!(first.contexts.len(), 2);
    /// let rest = store.list_contexts("acme", 2, first.next_page_token.as_deref())?;
    /// assert_eq!((rest.contexts.len(), rest.next_page_token), (1, None));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn list_contexts(
        &self,
        tenant: &str,
        page_size: usize,
        page_token: Option<&str>,
    ) -> Result<ContextPage> {
        check_page_size(page_size, "page_size")?;
        let mut cursor = page_token.map(decode_page_token).transpose()?;
        // Listed contexts that expired are passed over: a page is filled
        // with live ones, and is empty only when the listing is over.
        let mut page: Vec<(u64, ContextKey, ContextInfo)> = Vec::new();
        while page.len() <= page_size {
            let batch = self.index.tenant_page(tenant, cursor, page_size + 1);
            let Some((ms, slot)) = batch.last() else {
                break;
            };
            cursor = Some((*ms, slot.key));
            page.extend(batch.iter().filter_map(|(ms, slot)| {
                info_of(slot, self.options.retention).map(|info| (*ms, slot.key, info))
            }));
        }
        let more = page.len() > page_size;
        page.truncate(page_size);
        let next_page_token = match page.last() {
            Some((ms, key, _)) if more => Some(encode_page_token(*ms, key)),
            _ => None,
        };
        Ok(ContextPage {
            contexts: page.into_iter().map(|(_, _, info)| info).collect(),
            next_page_token,
        })
    }
}

/// Turns of `items`, newest first, each read only when asked for.
fn turns<'a, 'r>(
    records: &'a mut ContextRecords<'r>,
    items: &'a [HistoryItem],
) -> impl Iterator<Item = Result<Turn>> + use<'a, 'r> {
    items.iter().rev().map(move |item| {
        if item.chunks > 0 {
            return artifact_turn(records, item);
        }
        records.message(item.loc, |view, blob| {
            let mut turn = render::turn_from_message(view.seq, blob);
            // The task the store put the message in, which a client's
            // first message cannot name itself.
            if let Some(task) = view.kind.task_id() {
                turn.task_id = Some(task.to_string());
            }
            turn
        })
    })
}

/// The structured history's choice of `newest_first`: whole turns while
/// their text fits the budget's bytes (the newest cut to fit).
fn choose_turns(
    newest_first: impl Iterator<Item = Result<Turn>>,
    total: u64,
    budget: &Budget,
) -> Result<(Vec<Turn>, u64)> {
    let room = budget.max_bytes;
    let cost = |t: &Turn| t.text.len();
    render::choose(newest_first, total, budget.max_messages, room, cost, |t| {
        render::cut_to_fit(t, room, cost)
    })
}

/// `newest_first` rendered in a frame marked with `nonce`: whole turns
/// while their rendering fits the budget's bytes less the frame's.
fn rendered(
    newest_first: impl Iterator<Item = Result<Turn>>,
    total: u64,
    budget: &Budget,
    nonce: &str,
) -> Result<Rendered> {
    let room = budget
        .max_bytes
        .saturating_sub(render::frame_overhead(nonce));
    // Each turn is rendered once, as it is read; its length is its cost.
    let rendered = newest_first.map(|t| {
        t.map(|t| {
            let text = render::turn_text(nonce, &t);
            (t, text)
        })
    });
    let (turns, omitted) = render::choose(
        rendered,
        total,
        budget.max_messages,
        room,
        |(_, text)| text.len(),
        |(turn, _)| {
            let cost = |t: &Turn| render::turn_cost(nonce, t);
            let turn = render::cut_task_to_fit(turn, room, cost);
            let turn = render::cut_to_fit(turn, room, cost);
            let text = render::turn_text(nonce, &turn);
            (turn, text)
        },
    )?;
    let texts: Vec<String> = turns.into_iter().map(|(_, text)| text).collect();
    Ok(render::frame(&texts, omitted, nonce))
}

/// The short line of an artifact: its name or id, and its chunk count.
fn artifact_turn(records: &mut ContextRecords, item: &HistoryItem) -> Result<Turn> {
    records.record(item.loc, |body, blob| {
        let artifact: Option<crate::a2a::Artifact> = serde_json::from_slice(blob).ok();
        let label = match &artifact {
            Some(a) => match &a.name {
                Some(name) => format!("artifact {name:?} ({})", a.artifact_id),
                None => format!("artifact {}", a.artifact_id),
            },
            None => "artifact".to_string(),
        };
        Turn {
            position: body.seq,
            role: render::Role::Agent,
            artifact: true,
            task_id: body.kind.task_id().map(str::to_string),
            task_cut: 0,
            speaker: None,
            text: format!("{label}, {} chunk(s)", item.chunks),
            cut: 0,
        }
    })
}

fn info_of(slot: &ContextSlot, retention: Option<std::time::Duration>) -> Option<ContextInfo> {
    let state = slot.state.read();
    if state.life(now_ms(), retention) != Life::Live {
        return None;
    }
    let meta = state.meta.as_ref()?;
    Some(ContextInfo {
        context_id: meta.context_id().to_string(),
        key: slot.key,
        first_activity_ms: meta.first_ms,
        last_activity_ms: state.last_ms,
        messages: state.history_len(),
        tasks: state.task_count() as u64,
    })
}

fn encode_page_token(first_ms: u64, key: &ContextKey) -> String {
    let mut tail = vec![key.version()];
    tail.extend_from_slice(key.digest());
    encode_cursor(first_ms, &tail)
}

fn decode_page_token(token: &str) -> Result<(u64, ContextKey)> {
    let (ms, tail) = decode_cursor(token, "page_token")?;
    match tail.split_first() {
        Some((&version, digest)) => match <[u8; 32]>::try_from(digest) {
            Ok(digest) => Ok((ms, ContextKey::from_parts(version, digest))),
            Err(_) => Err(bad_cursor("page_token")),
        },
        None => Err(bad_cursor("page_token")),
    }
}
