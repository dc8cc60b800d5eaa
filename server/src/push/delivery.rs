//! Push deliveries (A2A §4.3): each config's task's updates POSTed to its
//! webhook, at least once and in order, from the store.
//!
//! One delivery task per config reads the task's updates from the store a
//! page at a time after its position, POSTs each one, retries a failure
//! with growing, jittered delays (a config past `failing_after` failures in
//! a row is marked failing and tried at the slow pace, never dropped), and
//! writes its new position after every few acknowledgements, so a restart
//! resumes where the last acknowledgement left it. It holds a page at
//! most, whatever the backlog: the backlog is the log.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderName, HeaderValue};
use bytes::Bytes;
use tracing::{info, warn};

use crate::error::A2aError;
use crate::state::pushes::{Delivery, DeliveryKey};
use crate::state::Shared;
use crate::util::lock;
use crate::webhook::{Connection, Post, Stored, Target};

/// The most of a task's stored events a delivery reads at once.
const PAGE_BYTES: usize = 64 << 10;
/// Acknowledged events between two position records, at most: the most a
/// crash can make a receiver get twice, per config.
const POSITION_EVERY: u64 = 16;
/// How long a delivery with nothing to send waits before it looks at the
/// task again even if nothing woke it.
const IDLE_CHECK: Duration = Duration::from_secs(60);
/// How long a delivery with nothing to send waits for more before it
/// writes its position: a burst of events costs one position record.
const LINGER: Duration = Duration::from_secs(1);
/// Once woken, a delivery reads when its task has written nothing more
/// for this long...
const GATHER_QUIET: Duration = Duration::from_millis(1);
/// ...or this long after the wake, whichever comes first: a turn's burst
/// of events is read in one page, after the turn's writes rather than
/// between them.
const GATHER_MOST: Duration = Duration::from_millis(10);
/// The header that carries the event's number in its task.
const SEQ_HEADER: &str = "ctxlog-event-seq";

/// After the store opens: starts the delivery of every config whose task
/// lives, each of which ends at once if it has nothing left to send.
/// Returns how many were started.
pub(crate) async fn resume(shared: &Arc<Shared>) -> usize {
    if !shared.config.push.enabled {
        return 0;
    }
    let found = shared
        .store
        .blocking(|store| {
            let mut found = Vec::new();
            for task in store.push_tasks()? {
                for config in store.push_configs(&task.tenant, &task.task_id)? {
                    found.push((task.tenant.clone(), task.task_id.clone(), config));
                }
            }
            Ok(found)
        })
        .await;
    match found {
        Ok(found) => {
            let count = found.len();
            for (tenant, task_id, config) in found {
                let id = config.config_id.clone();
                spawn(shared, &tenant, &task_id, &id, Some(config));
            }
            count
        }
        Err(e) => {
            warn!(error = ?e, "the push configs could not be read; their deliveries wait for the next start");
            0
        }
    }
}

/// Starts the delivery for a config (replacing one under way for it), as
/// `known` (just stored), or as the store holds it.
pub(crate) fn spawn(
    shared: &Arc<Shared>,
    tenant: &str,
    task_id: &str,
    config_id: &str,
    known: Option<ctxlog::PushConfig>,
) {
    let key: DeliveryKey = (
        tenant.to_string(),
        task_id.to_string(),
        config_id.to_string(),
    );
    let delivery = shared.pushes.start(key.clone());
    let shared = shared.clone();
    tokio::spawn(async move {
        deliver(&shared, &key, &delivery, known).await;
        shared.pushes.finish(&key, &delivery);
    });
}

/// What a delivery waits for ends it early: it was stopped, or the server
/// shuts down.
async fn interrupted(shared: &Shared, delivery: &Delivery) {
    let mut shutdown = shared.shutdown.clone();
    tokio::select! {
        _ = delivery.stopped() => {}
        _ = shutdown.wait_for(|s| *s) => {}
    }
}

fn ended(shared: &Shared, delivery: &Delivery) -> bool {
    delivery.is_stopped() || *shared.shutdown.borrow()
}

/// One config's delivery, until the task is finished and every update
/// acknowledged, the config is deleted or replaced (either stops it), the
/// task's context is gone, or the server shuts down. Its position is
/// written after every [`POSITION_EVERY`] acknowledgements, once it has
/// had nothing to send for [`LINGER`], before it waits to retry, and at
/// its end (not when stopped: a replaced config's position is not its
/// successor's, and a deleted one needs none).
async fn deliver(
    shared: &Arc<Shared>,
    key: &DeliveryKey,
    delivery: &Delivery,
    known: Option<ctxlog::PushConfig>,
) {
    let (tenant, task_id, _) = key;
    // Woken by each write to the task; registered before the first read.
    let wake = shared.hub.wake_on(tenant, task_id);
    let Some(config) = open(shared, key, delivery, known).await else {
        return;
    };
    let mut at = Position {
        version: config.version,
        delivered: config.delivered,
        written: config.delivered,
    };
    run(shared, key, delivery, &wake, &config, &mut at).await;
    if !delivery.is_stopped() {
        at.write(shared, delivery, key).await;
    }
}

/// How far a delivery got, and how far the store knows it did.
struct Position {
    /// The config's version (see `ctxlog::PushConfig::version`).
    version: u64,
    /// The last event acknowledged.
    delivered: u64,
    /// The last position written.
    written: u64,
}

impl Position {
    /// Writes the position, if it moved since it was last written.
    async fn write(&mut self, shared: &Shared, delivery: &Delivery, key: &DeliveryKey) {
        if self.delivered > self.written
            && record(shared, delivery, key, self.version, self.delivered).await
        {
            self.written = self.delivered;
        }
    }
}

/// A delivery's loop: read a page of updates after the position, POST
/// them in order, wait for more.
///
/// The POSTs and the gathering are boxed: a future awaited in place
/// makes the task as large as its largest state, and a delivery spends
/// its life waiting, so the task holds only the loop's own state (1.3
/// KiB, where the POSTs' futures in place made every task 7 KiB, waiting
/// or not) and the rest is allocated while it runs. (The read's future
/// is small: boxing it saved nothing.)
async fn run(
    shared: &Shared,
    key: &DeliveryKey,
    delivery: &Delivery,
    wake: &crate::state::hub::Wake,
    config: &Opened,
    at: &mut Position,
) {
    let (tenant, task_id, _) = key;
    let mut connection = Connection::default();
    let mut store_failures = 0u32;
    // After a failed POST: the delay before the next try, which reads
    // one event only (a config whose receiver is down holds no page).
    let mut retry: Option<Duration> = None;
    while !ended(shared, delivery) {
        if let Some(delay) = retry.take() {
            at.write(shared, delivery, key).await;
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = interrupted(shared, delivery) => return,
            }
        }
        let page_bytes = match lock(&delivery.health).failures {
            0 => PAGE_BYTES,
            _ => 1,
        };
        let woken = wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let (t, id, after) = (tenant.clone(), task_id.clone(), at.delivered);
        let read = shared
            .store
            .blocking(move |store| {
                // The state and the count first: a task that was over
                // before the page was read has all of its events in it,
                // and a page that reaches the count holds every event
                // stored before the wake was enabled (any later one wakes
                // it).
                let progress = store.task_progress(&t, &id)?;
                let page = store.updates_page(&t, &id, after, page_bytes)?;
                Ok((page, progress.state.is_terminal(), progress.events))
            })
            .await;
        let (page, terminal, count) = match read {
            Ok(read) => read,
            // Its task's context is gone: nothing to deliver.
            Err(A2aError::TaskNotFound) => return,
            Err(e) => {
                // The store is being reopened, or failed: try again later.
                store_failures += 1;
                warn!(error = ?e, task = %task_id, "a push delivery could not read the store");
                retry = Some(retry_delay(shared, store_failures));
                continue;
            }
        };
        store_failures = 0;
        let empty = page.is_empty();
        let caught_up = match Box::pin(post_page(
            shared,
            delivery,
            key,
            config,
            &mut connection,
            at,
            page,
        ))
        .await
        {
            // Nothing new, or every event the read found acknowledged
            // up to the count: what comes next is told (the wake was
            // enabled before the read), so wait for it instead of
            // reading an empty page.
            Posted::All => empty || at.delivered >= count,
            Posted::Failed(delay) => {
                retry = Some(delay);
                false
            }
            Posted::Ended => return,
        };
        if caught_up {
            connection.park(&shared.pushes.pool, &config.target);
            if terminal {
                return;
            }
            // Idle: the position is written once nothing came for a while.
            let moved = at.delivered > at.written;
            let idle = if moved { LINGER } else { IDLE_CHECK };
            tokio::select! {
                _ = woken => Box::pin(gather(shared, delivery, wake)).await,
                _ = tokio::time::sleep(idle) => {
                    if moved {
                        at.write(shared, delivery, key).await;
                    }
                }
                _ = interrupted(shared, delivery) => {}
            }
        }
    }
}

/// After a wake: waits until the task has written nothing for
/// [`GATHER_QUIET`], or [`GATHER_MOST`] has passed, or the delivery is
/// interrupted. Whatever was written meanwhile is in the next read.
async fn gather(shared: &Shared, delivery: &Delivery, wake: &crate::state::hub::Wake) {
    let most = tokio::time::sleep(GATHER_MOST);
    tokio::pin!(most);
    loop {
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(GATHER_QUIET) => return,
            _ = &mut most => return,
            _ = interrupted(shared, delivery) => return,
        }
    }
}

/// How the POSTs of a page went.
enum Posted {
    /// Every event of it was acknowledged (or it was empty).
    All,
    /// One failed: try again after this delay, from the first not
    /// acknowledged.
    Failed(Duration),
    /// The delivery is over (stopped, or an event could not be written).
    Ended,
}

/// POSTs a page's events in order, moving the position on with each
/// acknowledgement (and writing it every [`POSITION_EVERY`]).
async fn post_page(
    shared: &Shared,
    delivery: &Delivery,
    key: &DeliveryKey,
    config: &Opened,
    connection: &mut Connection,
    at: &mut Position,
    page: Vec<(u64, ctxlog::a2a::StreamResponse)>,
) -> Posted {
    for (seq, event) in page {
        let body = match body_of(event, config.v03) {
            Ok(body) => Bytes::from(body),
            Err(e) => {
                warn!(error = %e, task = %key.1, "an event could not be written for a push");
                return Posted::Ended;
            }
        };
        let mut headers = config.headers.clone();
        headers.push((HeaderName::from_static(SEQ_HEADER), HeaderValue::from(seq)));
        let post = Post {
            body,
            headers: &headers,
        };
        match send(shared, delivery, key, &config.target, connection, &post).await {
            Sent::Acknowledged => {}
            Sent::Failed(delay) => return Posted::Failed(delay),
            Sent::Stopped => return Posted::Ended,
        }
        at.delivered = seq;
        lock(&delivery.health).delivered = seq;
        if at.delivered - at.written >= POSITION_EVERY {
            at.write(shared, delivery, key).await;
        }
    }
    Posted::All
}

/// An event as a delivery POSTs it: v1.0's `StreamResponse`, or for a
/// v0.3 client's config, v0.3's event object (`kind`; `final` on a status
/// that ends the task).
fn body_of(event: ctxlog::a2a::StreamResponse, v03: bool) -> serde_json::Result<Vec<u8>> {
    let event = event.into_wire();
    if !v03 {
        return serde_json::to_vec(&event);
    }
    let last = event
        .status_update
        .as_ref()
        .is_some_and(|u| u.status.state.is_terminal());
    let value = serde_json::to_value(&event)?;
    serde_json::to_vec(&ctxlog::a2a::v03::event_to_v03(
        value,
        last,
        ctxlog::a2a::v03::Wire::JsonRpc,
    ))
}

/// A config as a delivery uses it.
struct Opened {
    target: Target,
    headers: Vec<(HeaderName, HeaderValue)>,
    version: u64,
    delivered: u64,
    /// Events go in v0.3's JSON-RPC form (a v0.3 client's config).
    v03: bool,
}

/// The config a delivery starts with (it never changes under it: a
/// replace or a delete stops the delivery): where it goes, its headers,
/// and its position. `None`: there is nothing to deliver to.
async fn open(
    shared: &Shared,
    key: &DeliveryKey,
    delivery: &Delivery,
    mut known: Option<ctxlog::PushConfig>,
) -> Option<Opened> {
    let (tenant, task_id, config_id) = key;
    let mut attempt = 0;
    let config = loop {
        if let Some(known) = known.take() {
            break known;
        }
        let (t, id) = (tenant.clone(), task_id.clone());
        match shared
            .store
            .blocking(move |store| store.push_configs(&t, &id))
            .await
        {
            Ok(configs) => break configs.into_iter().find(|c| &c.config_id == config_id)?,
            Err(A2aError::TaskNotFound) => return None,
            Err(e) => {
                attempt += 1;
                warn!(error = ?e, task = %task_id, "a push delivery could not read the store");
                tokio::select! {
                    _ = tokio::time::sleep(retry_delay(shared, attempt)) => {}
                    _ = interrupted(shared, delivery) => return None,
                }
            }
        }
    };
    lock(&delivery.health).delivered = config.delivered;
    let parsed = serde_json::from_slice::<Stored>(&config.config)
        .ok()
        .and_then(|stored| {
            Some((
                Target::parse(&stored.url, true).ok()?,
                stored.headers().ok()?,
                stored.protocol.as_deref() == Some("0.3"),
            ))
        });
    match parsed {
        Some((target, headers, v03)) => Some(Opened {
            target,
            headers,
            version: config.version,
            delivered: config.delivered,
            v03,
        }),
        None => {
            warn!(task = %task_id, config = %config_id, "a stored push config could not be read; it is not delivered to");
            None
        }
    }
}

/// What one attempt to deliver an event came to.
enum Sent {
    Acknowledged,
    /// Not acknowledged: try again after this long.
    Failed(Duration),
    /// The delivery was stopped, or the server shuts down.
    Stopped,
}

/// POSTs one event once, and keeps the delivery's health: its failures in
/// a row, and whether it is failing (then it is tried at the slow pace).
async fn send(
    shared: &Shared,
    delivery: &Delivery,
    key: &DeliveryKey,
    target: &Target,
    connection: &mut Connection,
    post: &Post<'_>,
) -> Sent {
    let options = &shared.config.push;
    if ended(shared, delivery) {
        return Sent::Stopped;
    }
    // A delivery whose last attempt failed, or whose host's last request
    // failed, goes on places of its own.
    let retry = lock(&delivery.health).failures > 0 || shared.pushes.troubled(target);
    let places = match retry {
        false => &shared.pushes.in_flight,
        true => &shared.pushes.retrying,
    };
    let host = tokio::select! {
        p = shared.pushes.host_place(target) => p,
        _ = interrupted(shared, delivery) => return Sent::Stopped,
    };
    let permit = tokio::select! {
        p = places.clone().acquire_owned() => p.ok(),
        _ = interrupted(shared, delivery) => return Sent::Stopped,
    };
    let result = tokio::select! {
        r = connection.post(&shared.pushes.pool, target, post, options.timeout, options.allow_private) => r,
        _ = interrupted(shared, delivery) => return Sent::Stopped,
    };
    drop(permit);
    drop(host);
    shared.pushes.note(target, result.is_ok());
    let mut health = lock(&delivery.health);
    match result {
        Ok(()) => {
            if health.failing {
                info!(task = %key.1, config = %key.2, "a failing push config is delivered to again");
            }
            *health = crate::state::pushes::Health {
                delivered: health.delivered,
                ..Default::default()
            };
            Sent::Acknowledged
        }
        Err(e) => {
            health.failures += 1;
            if health.failures >= options.failing_after && !health.failing {
                health.failing = true;
                warn!(task = %key.1, config = %key.2, failures = health.failures, error = %e,
                    "a push config is failing: its webhook is retried every {} s until it answers",
                    options.failing_retry.as_secs());
            }
            health.last_error = Some(e);
            Sent::Failed(match health.failing {
                true => options.failing_retry,
                false => retry_delay(shared, health.failures),
            })
        }
    }
}

/// The delay after `failures` failures in a row: the base doubled for
/// each, at most the bound, a random half of it taken off (so configs that
/// failed together do not retry together).
fn retry_delay(shared: &Shared, failures: u32) -> Duration {
    let options = &shared.config.push;
    let full = options
        .retry_base
        .saturating_mul(1u32 << failures.saturating_sub(1).min(20))
        .min(options.retry_max);
    let mut bytes = [0u8; 8];
    let random = match getrandom::fill(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => 0,
    };
    let half = full / 2;
    let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
    half + Duration::from_nanos(random % nanos.max(1))
}

/// Writes the config's position (`through`, acknowledged, for the config
/// as set at `version`); whether the store took it (if not, the events
/// after the last position written are delivered again after a restart).
async fn record(
    shared: &Shared,
    delivery: &Delivery,
    key: &DeliveryKey,
    version: u64,
    through: u64,
) -> bool {
    let (t, id, cid) = key.clone();
    match shared
        .store
        .blocking(move |store| store.push_delivered(&t, &id, &cid, version, through))
        .await
    {
        Ok(_) => {
            lock(&delivery.health).delivered = through;
            true
        }
        Err(e) => {
            warn!(error = ?e, task = %key.1, "a push position could not be written; those events may be delivered again");
            false
        }
    }
}
