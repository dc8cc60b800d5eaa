//! The store every call uses: held in a cell so that a store poisoned by a
//! failed write or sync can be taken out and opened again (see
//! `recovery/health.rs`), and the way every call reaches it (on the blocking pool,
//! but a send's message and its turn's events, written deferred on the
//! async workers).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use ctxlog::Store;
use tracing::warn;

use crate::error::{from_store, A2aError};
use crate::util::lock;

/// The store, while it is in; why not, while it is out.
pub(crate) struct StoreCell {
    store: RwLock<Option<Arc<Store>>>,
    /// Why the store is out (or was last reopened).
    why: Mutex<String>,
    /// What the failure that took it out met (`StorageFull`: a full disk),
    /// which the calls refused meanwhile name.
    cause: Mutex<Option<std::io::ErrorKind>>,
    /// A reopen is under way.
    reopening: AtomicBool,
    /// The last reopen, and how many came each soon after the one before.
    last: Mutex<Option<(Instant, u32)>>,
    /// Bumped after each reopen (for a write that waits to try again).
    reopened: tokio::sync::watch::Sender<u64>,
    /// Starts the reopen of a poisoned store (given by the server, which
    /// the reopen needs whole: it resolves the turns the failure cut).
    reopen: Box<dyn Fn() + Send + Sync>,
    /// Deferred writes synced on the async worker (see `deferred`).
    synced_here: AtomicU64,
    /// Sends in flight (see [`sending`](Self::sending)).
    sends: AtomicUsize,
    /// The linger the store's syncs take while many sends are in flight.
    linger: Duration,
}

/// Sends in flight from which the store's syncs linger.
const MANY_SENDS: usize = 16;

/// A send in flight (see [`StoreCell::sending`]).
pub(crate) struct Sending<'a>(&'a AtomicUsize);

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl StoreCell {
    /// A cell holding `store`; `reopen` is called when a call finds it
    /// poisoned (once, until [`reopen_ended`](Self::reopen_ended)).
    pub(crate) fn new(store: Store, reopen: Box<dyn Fn() + Send + Sync>) -> Self {
        StoreCell {
            reopen,
            store: RwLock::new(Some(Arc::new(store))),
            why: Mutex::new(String::new()),
            cause: Mutex::new(None),
            reopening: AtomicBool::new(false),
            last: Mutex::new(None),
            reopened: tokio::sync::watch::channel(0).0,
            synced_here: AtomicU64::new(0),
            sends: AtomicUsize::new(0),
            linger: Duration::ZERO,
        }
    }

    /// The linger the store's group-commit syncs take while many sends
    /// are in flight (see [`sending`](Self::sending)); the store clamps it
    /// to [`ctxlog::MAX_COMMIT_LINGER`].
    pub(crate) fn with_linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }

    /// Counts a send in flight until the guard drops. A deferred write
    /// sets the store's linger from the count: while [`MANY_SENDS`] or
    /// more are in flight, a sync that follows another waits the
    /// configured linger so that more writes share it; once fewer than
    /// half as many are, syncs start at once (DESIGN §12, "Syncs shared
    /// under load"). A reopened store is set by the next write.
    pub(crate) fn sending(&self) -> Sending<'_> {
        self.sends.fetch_add(1, Ordering::Relaxed);
        Sending(&self.sends)
    }

    /// Brings the store's linger to what the sends in flight call for.
    fn pace(&self, store: &Store) {
        if self.linger.is_zero() {
            return;
        }
        let sends = self.sends.load(Ordering::Relaxed);
        let lingers = !store.commit_linger().is_zero();
        if !lingers && sends >= MANY_SENDS {
            store.set_commit_linger(self.linger);
        } else if lingers && sends < MANY_SENDS / 2 {
            store.set_commit_linger(Duration::ZERO);
        }
    }

    /// How many deferred writes were synced on the async worker, as a
    /// lone connection's are (see [`deferred`](Self::deferred)).
    pub(crate) fn synced_here(&self) -> u64 {
        self.synced_here.load(Ordering::Relaxed)
    }

    /// Follows the reopens: the receiver changes after each.
    pub(crate) fn reopens(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reopened.subscribe()
    }

    /// The store, unless it is being reopened.
    pub(crate) fn get(&self) -> Option<Arc<Store>> {
        self.store
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn set(&self, store: Option<Arc<Store>>) -> Option<Arc<Store>> {
        let mut cell = self
            .store
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::replace(&mut *cell, store)
    }

    /// Takes the store for good (at shutdown).
    pub(crate) fn take(&self) -> Option<Arc<Store>> {
        self.set(None)
    }

    /// What the store's state is, for `/healthz` and the errors calls get:
    /// `None` while it takes writes.
    pub(crate) fn trouble(&self) -> Option<String> {
        match self.get() {
            Some(store) if !store.is_poisoned() => None,
            Some(_) => Some("the store refuses writes after a failed write or sync".into()),
            None => Some(format!(
                "the store is being reopened after a failed write or sync ({})",
                lock(&self.why)
            )),
        }
    }

    /// Runs a store call on the blocking pool (never on the async workers).
    /// A store that is being reopened (after a failed write or sync)
    /// answers `Poisoned` at once; a call that finds the store poisoned
    /// starts its reopen.
    pub(crate) async fn blocking_raw<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> ctxlog::Result<T> + Send + 'static,
    ) -> ctxlog::Result<T> {
        let Some(store) = self.get() else {
            return Err(self.out());
        };
        let held = store.clone();
        let result = match tokio::task::spawn_blocking(move || f(&held)).await {
            Ok(result) => result,
            Err(_) => Err(ctxlog::Error::InvalidParams {
                field: "store",
                reason: "a store call panicked".into(),
            }),
        };
        if let Err(e) = &result {
            self.check(&store, e);
        }
        result
    }

    /// A write deferred, on the calling async worker: `write` checks and
    /// writes it (a task event: `Store::update_status_deferred` or
    /// `add_artifact_deferred`; a message: `Store::receive_deferred`) and
    /// gives it with what follows it (`then`: reads what the caller needs,
    /// starts a turn); the task awaits its sync without parking a thread,
    /// then it is published and `then` runs, still on the worker (the
    /// records are fresh, in memory). If the awaiting task is dropped
    /// first (a client that went away, a turn aborted), a blocking-pool
    /// thread publishes it and runs `then`, so what follows a stored write
    /// happens whoever waits for it. `None` when the write cannot be
    /// deferred (the context's lock is held, the store is out, or writes
    /// wait for synchronous replication): the caller writes it on the
    /// blocking pool. A periodic checkpoint that fell due is written on the
    /// blocking pool.
    ///
    /// `alone`: the server serves one connection, this write's. Its sync
    /// is then run here, on the worker, instead of by the store's syncer
    /// (which would be woken, and would wake this task back: two hand-offs
    /// between threads, about a tenth of a lone client's latency). With
    /// more connections the syncer's group commit is kept: a worker parked
    /// through a sync would hold up the other connections' requests.
    pub(crate) async fn deferred<P, F, T>(
        &self,
        alone: bool,
        write: impl FnOnce(&Arc<Store>) -> ctxlog::Result<Option<(P, F)>>,
    ) -> Option<ctxlog::Result<T>>
    where
        P: Pending + Send + 'static,
        F: FnOnce(&Store, P::Out) -> ctxlog::Result<T> + Send + 'static,
    {
        let store = self.get()?;
        self.pace(&store);
        let result = match write(&store) {
            Ok(None) => return None,
            Ok(Some((pending, then))) => {
                if alone && pending.unsynced() {
                    // A failed sync poisons the store: `durable` then
                    // resolves with the error, as it would from the syncer.
                    let _ = store.sync();
                    self.synced_here.fetch_add(1, Ordering::Relaxed);
                }
                let durable = pending.durable();
                let held = Unawaited::new(store.clone(), pending, then);
                // Its error, if the sync failed, is publish's too.
                let _ = durable.await;
                held.finish()
            }
            Err(e) => Err(e),
        };
        if store.checkpoint_due() {
            let due = store.clone();
            drop(tokio::task::spawn_blocking(move || due.checkpoint_if_due()));
        }
        if let Err(e) = &result {
            self.check(&store, e);
        }
        Some(result)
    }

    /// [`blocking_raw`](Self::blocking_raw), its error as the caller sees it.
    pub(crate) async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> ctxlog::Result<T> + Send + 'static,
    ) -> Result<T, A2aError> {
        self.blocking_raw(f).await.map_err(from_store)
    }

    /// After a store call failed: if the store is now poisoned, starts its
    /// reopen (once; a reopen under way is not started again).
    fn check(&self, store: &Store, error: &ctxlog::Error) {
        if !store.is_poisoned() || self.reopening.swap(true, Ordering::AcqRel) {
            return;
        }
        *lock(&self.why) = error.to_string();
        *lock(&self.cause) = store.poison_cause().or_else(|| io_kind(error));
        warn!(error = %error, "the store refuses writes; reopening it");
        (self.reopen)();
    }

    /// Records why the store is out (no I/O error: a promotion).
    pub(crate) fn set_why(&self, why: String) {
        *lock(&self.why) = why;
        *lock(&self.cause) = None;
    }

    /// Records why the store is still out: its reopen failed.
    pub(crate) fn reopen_failed(&self, error: &ctxlog::Error) {
        *lock(&self.why) = error.to_string();
        if let Some(kind) = io_kind(error) {
            *lock(&self.cause) = Some(kind);
        }
    }

    /// The error a call gets while the store is out: it names the cause.
    fn out(&self) -> ctxlog::Error {
        ctxlog::Error::Poisoned {
            cause: *lock(&self.cause),
        }
    }

    /// The reopen has ended (the store is in, or it will be tried again at
    /// the next call that finds it poisoned).
    pub(crate) fn reopen_ended(&self) {
        self.reopening.store(false, Ordering::Release);
    }

    /// Marks a reopen done: writes waiting for it try again.
    pub(crate) fn reopened(&self) {
        self.reopened.send_modify(|n| *n += 1);
    }

    /// The delay before this reopen: none, unless the store poisoned again
    /// soon after the last one (a disk still full).
    pub(crate) fn reopen_delay(&self) -> Duration {
        let mut last = lock(&self.last);
        let streak = match *last {
            Some((at, streak)) if at.elapsed() < Duration::from_secs(60) => streak + 1,
            _ => 0,
        };
        *last = Some((Instant::now(), streak));
        backoff(streak)
    }
}

/// The I/O error `error` met, if it was one.
fn io_kind(error: &ctxlog::Error) -> Option<std::io::ErrorKind> {
    match error {
        ctxlog::Error::Poisoned { cause } => *cause,
        ctxlog::Error::Io { source, .. } => Some(source.kind()),
        _ => None,
    }
}

/// A write of the store's not yet published (see [`StoreCell::deferred`]).
pub(crate) trait Pending {
    /// What publishing it gives.
    type Out;
    /// Resolves once it is durable.
    fn durable(&self) -> ctxlog::Durable;
    /// Whether it wrote bytes that wait for a sync (a resend wrote none).
    fn unsynced(&self) -> bool;
    /// Publishes it.
    fn publish(self) -> ctxlog::Result<Self::Out>;
}

/// A pending write while its sync is awaited, and what follows it.
struct Unawaited<P, F, T>
where
    P: Pending + Send + 'static,
    F: FnOnce(&Store, P::Out) -> ctxlog::Result<T> + Send + 'static,
{
    store: Arc<Store>,
    /// Taken by `finish`, or by `Drop` if the awaiting task is dropped.
    rest: Option<(P, F)>,
    out: std::marker::PhantomData<fn() -> T>,
}

impl<P, F, T> Unawaited<P, F, T>
where
    P: Pending + Send + 'static,
    F: FnOnce(&Store, P::Out) -> ctxlog::Result<T> + Send + 'static,
{
    fn new(store: Arc<Store>, pending: P, then: F) -> Self {
        Unawaited {
            store,
            rest: Some((pending, then)),
            out: std::marker::PhantomData,
        }
    }

    /// Publishes it and runs what follows, here.
    fn finish(mut self) -> ctxlog::Result<T> {
        // Always there: only this, which takes `self`, and `Drop` take it.
        let (pending, then) = self
            .rest
            .take()
            .ok_or(ctxlog::Error::Poisoned { cause: None })?;
        pending.publish().and_then(|out| then(&self.store, out))
    }
}

impl<P, F, T> Drop for Unawaited<P, F, T>
where
    P: Pending + Send + 'static,
    F: FnOnce(&Store, P::Out) -> ctxlog::Result<T> + Send + 'static,
{
    fn drop(&mut self) {
        let Some((pending, then)) = self.rest.take() else {
            return;
        };
        let store = self.store.clone();
        let rest = move || {
            if let Ok(out) = pending.publish() {
                drop(then(&store, out));
            }
        };
        // Off the worker: publishing waits for the sync. Outside a runtime
        // (its shutdown) it is done here.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(rest)),
            Err(_) => rest(),
        }
    }
}

impl Pending for ctxlog::PendingWrite {
    type Out = ctxlog::EventRecord;
    fn durable(&self) -> ctxlog::Durable {
        self.durable()
    }
    fn unsynced(&self) -> bool {
        true
    }
    fn publish(self) -> ctxlog::Result<Self::Out> {
        self.publish()
    }
}

impl Pending for ctxlog::PendingReceive {
    type Out = ctxlog::Receipt;
    fn durable(&self) -> ctxlog::Durable {
        self.durable()
    }
    fn unsynced(&self) -> bool {
        !self.receipt().duplicate
    }
    fn publish(self) -> ctxlog::Result<Self::Out> {
        self.publish()
    }
}

/// The longest delay between two reopens.
const MAX_DELAY: Duration = Duration::from_secs(30);

/// 250 ms, doubled for each attempt, at most [`MAX_DELAY`] (none for the
/// first).
pub(crate) fn backoff(attempt: u32) -> Duration {
    match attempt {
        0 => Duration::ZERO,
        n => Duration::from_millis(250u64 << n.min(10)).min(MAX_DELAY),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::task::Poll;

    /// A send whose client goes away while its message's sync is awaited:
    /// the message is still published (a resend finds it), what follows it
    /// (its turn's start) still runs, and its messageId is let go.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_receive_dropped_while_its_sync_is_awaited_is_published() {
        let dir = tempfile::tempdir().unwrap();
        let options = ctxlog::Options::default().durability(ctxlog::Durability::GroupCommit);
        let store = Store::open(dir.path(), options).unwrap();
        let cell = StoreCell::new(store, Box::new(|| {}));
        // Bounded: a sync that lands before the first poll leaves nothing
        // to drop, and the next message tries again.
        let (followed, follows) = std::sync::mpsc::channel();
        let mut dropped = None;
        for attempt in 0..100 {
            let raw = format!(
                r#"{{"messageId":"m{attempt}","contextId":"c","role":"ROLE_USER","parts":[{{"text":"hi"}}]}}"#
            );
            let followed = followed.clone();
            let write = |s: &Arc<Store>| {
                let pending =
                    s.receive_deferred("t", raw.as_bytes(), ctxlog::MessageIds::Idempotent)?;
                let then = move |_: &Store, receipt: ctxlog::Receipt| {
                    let _ = followed.send(receipt.task_id.clone());
                    Ok(receipt)
                };
                Ok(pending.map(|p| (p, then)))
            };
            let future = cell.deferred(false, write);
            let mut future = std::pin::pin!(future);
            let first = std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await;
            if first.is_pending() {
                dropped = Some(raw.clone());
                break;
            }
        }
        let raw = dropped.expect("no sync was ever awaited");
        let store = cell.get().unwrap();
        let resend =
            tokio::task::spawn_blocking(move || store.receive_message("t", raw.as_bytes()));
        let resend = tokio::time::timeout(Duration::from_secs(30), resend)
            .await
            .expect("the dropped receive kept its messageId")
            .unwrap()
            .unwrap();
        assert!(resend.duplicate, "the dropped receive was published");
        // What follows it runs too, off the worker, for that message (after
        // the messages whose sync landed before the first poll).
        let ran = tokio::task::spawn_blocking(move || {
            std::iter::from_fn(|| follows.recv_timeout(Duration::from_secs(30)).ok())
                .find(|task_id| *task_id == resend.task_id)
        });
        assert!(ran.await.unwrap().is_some(), "its turn would not start");
    }

    #[test]
    fn the_delay_grows_from_nothing_to_its_bound() {
        let delays: Vec<Duration> = (0..14).map(backoff).collect();
        assert_eq!(delays[0], Duration::ZERO);
        assert_eq!(delays[1], Duration::from_millis(500));
        assert!(delays.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(delays[13], MAX_DELAY);
    }
}
