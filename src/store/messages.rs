//! Messages read into a buffer the caller keeps: [`Store::last_messages_into`].

use super::{Store, StoredMessage};
use crate::error::Result;

/// Messages read into one buffer that the caller keeps and reuses
/// ([`Store::last_messages_into`]): each read replaces what it holds and
/// keeps its memory, so once it has grown to fit, a read allocates nothing.
///
/// # Examples
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
/// use ctxlog::MessageBuf;
/// for text in ["one", "two", "three"] {
///     store.append_message("acme", "case-42", text.as_bytes())?;
/// }
/// let mut buf = MessageBuf::new();
/// store.last_messages_into("acme", "case-42", 2, &mut buf)?;
/// let raws: Vec<&[u8]> = buf.iter().map(|m| m.raw).collect();
/// assert_eq!(raws, [&b"two"[..], &b"three"[..]]);
/// assert_eq!(buf.get(1).map(|m| m.seq), Some(2));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageBuf {
    /// The messages' bytes, one after the other.
    bytes: Vec<u8>,
    /// Per message, in order: its seq, its timestamp, and where its bytes
    /// end in `bytes` (they start where the message before ends).
    messages: Vec<(u64, u64, usize)>,
}

/// A message of a [`MessageBuf`]: a [`StoredMessage`] whose bytes the
/// buffer lends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredMessageRef<'a> {
    /// Position in the context's order.
    pub seq: u64,
    /// When it was appended (ms since the Unix epoch).
    pub timestamp_ms: u64,
    /// The bytes as received.
    pub raw: &'a [u8],
}

impl From<StoredMessageRef<'_>> for StoredMessage {
    fn from(m: StoredMessageRef<'_>) -> Self {
        StoredMessage {
            seq: m.seq,
            timestamp_ms: m.timestamp_ms,
            raw: m.raw.to_vec(),
        }
    }
}

impl MessageBuf {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many messages it holds.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Message `i` (0: the oldest it holds).
    pub fn get(&self, i: usize) -> Option<StoredMessageRef<'_>> {
        let &(seq, timestamp_ms, end) = self.messages.get(i)?;
        let start = match i.checked_sub(1) {
            Some(before) => self.messages.get(before)?.2,
            None => 0,
        };
        Some(StoredMessageRef {
            seq,
            timestamp_ms,
            raw: self.bytes.get(start..end)?,
        })
    }

    /// Its messages, oldest first.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = StoredMessageRef<'_>> + '_ {
        let mut start = 0;
        self.messages.iter().map(move |&(seq, timestamp_ms, end)| {
            // Each end is at or after the one before and within `bytes`, as
            // `push` keeps them.
            let raw = self.bytes.get(start..end).unwrap_or_default();
            start = end;
            StoredMessageRef {
                seq,
                timestamp_ms,
                raw,
            }
        })
    }

    /// Empties it, keeping its memory.
    fn clear(&mut self) {
        self.bytes.clear();
        self.messages.clear();
    }

    /// Adds a message after the others.
    fn push(&mut self, seq: u64, timestamp_ms: u64, raw: &[u8]) {
        self.bytes.extend_from_slice(raw);
        self.messages.push((seq, timestamp_ms, self.bytes.len()));
    }
}

impl Store {
    /// The last `n` messages of a context, oldest first, as
    /// [`last_messages`](Self::last_messages) reads them, into `buf` (what
    /// it held is replaced): one copy of each message into memory the
    /// caller keeps, so a reused buffer makes a read allocate nothing. On an
    /// error `buf` is left empty.
    ///
    /// See [`MessageBuf`] for an example.
    pub fn last_messages_into(
        &self,
        tenant: &str,
        context_id: &str,
        n: usize,
        buf: &mut MessageBuf,
    ) -> Result<()> {
        self.messages_before_into(tenant, context_id, None, n, None, buf)
    }

    /// The last `n` messages of a context with a seq below `before` (all
    /// of them for `None`), oldest first, into `buf` as
    /// [`last_messages_into`](Self::last_messages_into) reads them: a page
    /// of the history read backwards from any point, reading only those
    /// records. `before` need not be a message's seq. With `head`, only the
    /// first `head` bytes of each message are copied: a reader of messages
    /// that begin with a header (as the Python package's LangGraph
    /// checkpointer writes them) reads the headers of a whole history
    /// without copying what follows them.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = ctxlog::Store::open(dir.path(), ctxlog::Options::default())?;
    /// for text in ["one", "two", "three", "four"] {
    ///     store.append_message("acme", "case-42", text.as_bytes())?;
    /// }
    /// let mut page = ctxlog::MessageBuf::new();
    /// store.messages_before_into("acme", "case-42", Some(3), 2, None, &mut page)?; // seqs 1 and 2
    /// let raws: Vec<&[u8]> = page.iter().map(|m| m.raw).collect();
    /// assert_eq!(raws, [&b"two"[..], &b"three"[..]]);
    /// store.messages_before_into("acme", "case-42", None, 4, Some(2), &mut page)?;
    /// let heads: Vec<&[u8]> = page.iter().map(|m| m.raw).collect();
    /// assert_eq!(heads, [&b"on"[..], &b"tw"[..], &b"th"[..], &b"fo"[..]]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn messages_before_into(
        &self,
        tenant: &str,
        context_id: &str,
        before: Option<u64>,
        n: usize,
        head: Option<usize>,
        buf: &mut MessageBuf,
    ) -> Result<()> {
        buf.clear();
        let head = head.unwrap_or(usize::MAX);
        let read = self.with_newest_before(tenant, context_id, before, n, |records, refs, _| {
            for r in refs {
                records.message(r.loc(), |view, raw| {
                    buf.push(view.seq, view.timestamp_ms, raw.get(..head).unwrap_or(raw));
                })?;
            }
            Ok(())
        });
        if read.is_err() {
            buf.clear();
        }
        read
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::a2a::{Message, Role, TaskState, TaskStatus};
    use crate::error::Error;
    use crate::options::Options;

    /// A context of plain appends, received messages and status replies.
    fn fill(store: &Store) {
        for i in 0..5 {
            store
                .append_message("t", "c", format!("plain {i}").as_bytes())
                .unwrap();
        }
        let raw =
            br#"{"messageId":"m1","role":"ROLE_USER","contextId":"c","parts":[{"text":"hi"}]}"#;
        let r = store.receive_message("t", raw).unwrap();
        let reply = Message::new("a1", Role::Agent, &["Done."]);
        let done = TaskStatus::new(TaskState::Completed).with_message(reply);
        store.update_status("t", &r.status_update(done)).unwrap();
        store.append_message("t", "c", b"last").unwrap();
    }

    fn read(store: &Store, n: usize, buf: &mut MessageBuf) -> Vec<StoredMessage> {
        store.last_messages_into("t", "c", n, buf).unwrap();
        let got: Vec<StoredMessage> = buf.iter().map(StoredMessage::from).collect();
        let by_index: Vec<StoredMessage> =
            (0..buf.len()).map(|i| buf.get(i).unwrap().into()).collect();
        assert_eq!(got, by_index);
        assert_eq!(buf.get(buf.len()), None);
        assert_eq!(buf.is_empty(), got.is_empty());
        got
    }

    #[test]
    fn a_buffer_reads_what_last_messages_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut buf = MessageBuf::new();
        for reopened in [false, true] {
            let store = Store::open(dir.path(), Options::default()).unwrap();
            if !reopened {
                fill(&store);
            }
            // Larger and smaller reads in turn, into the same buffer.
            for n in [usize::MAX, 0, 3, 1, 8, 2, usize::MAX] {
                let want = store.last_messages("t", "c", n).unwrap();
                assert_eq!(read(&store, n, &mut buf), want, "n = {n}");
                assert_eq!(buf.len(), n.min(8));
            }
            let raws: Vec<&[u8]> = buf.iter().map(|m| m.raw).collect();
            assert_eq!(raws.first(), Some(&&b"plain 0"[..]));
            assert_eq!(raws.last(), Some(&&b"last"[..]));
            store.close().unwrap();
        }
    }

    #[test]
    fn an_error_leaves_the_buffer_empty() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Options::default()).unwrap();
        fill(&store);
        store.append_message("t", "d", b"other").unwrap();
        let mut buf = MessageBuf::new();
        assert_eq!(read(&store, 4, &mut buf).len(), 4);
        assert!(matches!(
            store.last_messages_into("other", "c", 4, &mut buf),
            Err(Error::ContextNotFound)
        ));
        assert!(buf.is_empty());
        store.close().unwrap();

        // A damaged byte in the newest message: refused, nothing served.
        let seg = crate::log::segments::list_segment_ids(&crate::fs::OsFs, dir.path())
            .unwrap()
            .into_iter()
            .map(|id| crate::log::segments::segment_path(dir.path(), id))
            .next_back()
            .unwrap();
        let mut bytes = std::fs::read(&seg).unwrap();
        let at = bytes.windows(4).rposition(|w| w == b"last").unwrap();
        bytes[at] ^= 1;
        std::fs::write(&seg, bytes).unwrap();
        let store = Store::open(dir.path(), Options::default()).unwrap();
        store.last_messages_into("t", "d", 4, &mut buf).unwrap();
        assert_eq!(buf.len(), 1);
        assert!(matches!(
            store.last_messages_into("t", "c", 4, &mut buf),
            Err(Error::Corrupt { .. })
        ));
        assert!(buf.is_empty());
    }
}
