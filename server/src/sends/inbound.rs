//! A send's first half: its message received (durable before anything
//! else happens, under the `Idempotency-Key` and messageId rules, on the
//! async worker where it can be) and, unless it was received before, its
//! turn started. `bindings/core.rs` waits for the turn and answers.

use std::sync::Arc;

use ctxlog::{MessageIds, Receipt, TurnGuard};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::OwnedSemaphorePermit;

use crate::config::Idempotency;
use crate::error::{busy, from_store, A2aError};
use crate::sends::turn;
use crate::state::hub::Follower;
use crate::state::keys::Key;
use crate::state::Shared;

/// A send received and, unless it was a resend, its turn begun.
pub(crate) struct Begun {
    pub(crate) receipt: Receipt,
    /// Follows the task; taken before the turn starts.
    pub(crate) events: Follower,
    /// The push config given with the message, as stored with it.
    pub(crate) push: Option<ctxlog::PushConfig>,
}

/// What a send brings: its message, in v1.0's form or (`v03`) v0.3's, and
/// the push config given with it (read by `push::check_inline` before the
/// message is received).
pub(crate) struct Inbound<'a> {
    pub(crate) message: &'a RawValue,
    pub(crate) v03: bool,
    pub(crate) push: Option<crate::push::configs::Inline>,
    /// The send streams its task's events (counted among its streams from
    /// before its turn starts).
    pub(crate) streamed: bool,
}

/// [`begin`] under the request's `Idempotency-Key`, if it has one: a new
/// key is stored first; a replay is looked up as a resend (and received
/// only if the first attempt never stored its message); the key is held
/// until the message is received, so a request with the same key waits.
pub(crate) async fn begin_keyed(
    shared: &Arc<Shared>,
    tenant: &str,
    inbound: &Inbound<'_>,
    key: Option<Key>,
) -> Result<Begun, A2aError> {
    let claim = match &key {
        Some(key) => Some(
            shared
                .keys
                .claim(
                    &shared.store,
                    shared.config.idempotency_key_window,
                    tenant,
                    key,
                )
                .await?,
        ),
        None => None,
    };
    let replay = claim.as_ref().is_some_and(|c| c.replay);
    let begun = begin(shared, tenant, inbound, replay).await;
    drop(claim);
    begun
}

/// Receives the message (durable before anything else happens) and,
/// unless it was received before, starts its turn. A resend is told by its
/// messageId (`--idempotency message-id`), or only as the replay of an
/// `Idempotency-Key` (`replay`; messageIds are then labels). At the bound
/// on turns a resend is still answered (it starts none); any other message
/// is refused before anything is stored.
async fn begin(
    shared: &Arc<Shared>,
    tenant: &str,
    inbound: &Inbound<'_>,
    replay: bool,
) -> Result<Begun, A2aError> {
    let (v03, streamed) = (inbound.v03, inbound.streamed);
    let push = inbound.push.clone();
    let permit = shared.turns.permit();
    let ids = match shared.config.idempotency {
        Idempotency::MessageId => MessageIds::Idempotent,
        Idempotency::Header => MessageIds::Labels,
    };
    // Whether a message received before answers this one.
    let look_up = replay || ids == MessageIds::Idempotent;
    let at_bound = permit.is_none();
    let raw = inbound.message.get().as_bytes().to_vec();
    let t = tenant.to_string();
    let single = shared.config.single_active_turn;
    // The common case, on this worker with no crossing to the blocking pool
    // (DESIGN §12, "A send"): a message to take a place for, with no push
    // config, no lookup first and no context lock of the server's own.
    let mut permit = permit;
    if permit.is_some() && !replay && !single && push.is_none() {
        let deferred = shared
            .store
            .deferred(shared.alone(), |store| {
                let pending = match v03 {
                    false => store.receive_deferred(&t, &raw, ids),
                    true => store.receive_v03_deferred(&t, &raw, ids),
                };
                let pending = pending.map_err(|e| direct_reply_refused(store, &t, &raw, e))?;
                // Taken only once written: otherwise the blocking pool's
                // receive below needs the place.
                Ok(pending.map(|pending| {
                    let (shared, tenant, permit) = (shared.clone(), t.clone(), permit.take());
                    // Once published: the turn starts, on the worker, or on
                    // the blocking pool if the client went away meanwhile.
                    let then = move |store: &ctxlog::Store, receipt: Receipt| {
                        let prepared = (!receipt.duplicate).then(|| {
                            let (task, context) = (&receipt.task_id, &receipt.context_id);
                            turn::Prepared::read(store, &tenant, task, context)
                        });
                        let prepared = prepared.and_then(Result::ok);
                        Ok(started(
                            &shared, &tenant, receipt, None, permit, prepared, None, streamed,
                        ))
                    };
                    (pending, then)
                }))
            })
            .await;
        if let Some(begun) = deferred {
            return begun.map_err(refused);
        }
    }
    let locks = shared.clone();
    // The receive, (for a new turn) what its agent is called with, and
    // its start, in one call to the blocking pool: whether the client
    // waits for it or not, a message stored gets its turn.
    let begun = shared
        .store
        .blocking_raw(move |store| {
            if (at_bound && look_up) || replay {
                if let Some(r) = find_received(store, &t, &raw, v03)? {
                    return Ok(Some(started(
                        &locks, &t, r, None, permit, None, None, streamed,
                    )));
                }
            }
            if at_bound {
                return Ok(None);
            }
            let message = Incoming {
                raw: &raw,
                v03,
                push: push.as_ref(),
            };
            let received = if single {
                receive_single(store, &locks, &t, &message, ids)
            } else {
                receive(store, &t, &message, ids).map(|r| (r, None))
            };
            let ((receipt, pushed), lease) =
                received.map_err(|e| direct_reply_refused(store, &t, &raw, e))?;
            let prepared = match receipt.duplicate {
                true => None,
                false => {
                    turn::Prepared::read(store, &t, &receipt.task_id, &receipt.context_id).ok()
                }
            };
            let begun = started(
                &locks, &t, receipt, lease, permit, prepared, pushed, streamed,
            );
            Ok(Some(begun))
        })
        .await
        .map_err(refused)?;
    begun.ok_or_else(|| A2aError::Overloaded(shared.turns.max()))
}

/// A message received (durable now): its task is followed for the answer
/// (as a stream if `streamed`) and, unless it was received before, its
/// turn starts.
// Each argument is one the three callers hold apart; a struct to carry
// them would be built at each call and taken apart here.
#[allow(clippy::too_many_arguments)]
fn started(
    shared: &Arc<Shared>,
    tenant: &str,
    receipt: Receipt,
    lease: Option<TurnGuard>,
    permit: Option<OwnedSemaphorePermit>,
    prepared: Option<turn::Prepared>,
    push: Option<ctxlog::PushConfig>,
    streamed: bool,
) -> Begun {
    crate::crashpoint::point("received");
    let mut events = shared.hub.follow(tenant, &receipt.task_id);
    if streamed {
        // Before the turn starts: its events then keep the syncer's pace
        // (see `Turn::write`), and the stream sees them as updates.
        events.as_stream();
    }
    if let (false, Some(permit)) = (receipt.duplicate, permit) {
        start_turn(shared, tenant, &receipt, lease, permit, prepared);
    }
    Begun {
        receipt,
        events,
        push,
    }
}

/// A receive's refusal as the client sees it.
fn refused(e: ctxlog::Error) -> A2aError {
    match e {
        ctxlog::Error::ContextBusy { task_id, since_ms } => busy(&task_id, since_ms),
        e => from_store(e),
    }
}

/// A message refused for its task's state: a task that ended in a direct
/// reply was never the client's, so it is not found.
fn direct_reply_refused(
    store: &ctxlog::Store,
    tenant: &str,
    raw: &[u8],
    e: ctxlog::Error,
) -> ctxlog::Error {
    match e {
        ctxlog::Error::UnsupportedOperation { .. } if names_direct_reply(store, tenant, raw) => {
            ctxlog::Error::TaskNotFound
        }
        e => e,
    }
}

/// A message to receive: its bytes, in v1.0's form or (`v03`) v0.3's,
/// and the push config that came with it.
struct Incoming<'a> {
    raw: &'a [u8],
    v03: bool,
    push: Option<&'a crate::push::configs::Inline>,
}

/// A message received, and its push config as stored with it (if it
/// came with one and was new: a resend stores none).
type Received = (Receipt, Option<ctxlog::PushConfig>);

/// Receives the message, with its push config in the same durable write.
fn receive(
    store: &ctxlog::Store,
    tenant: &str,
    message: &Incoming<'_>,
    ids: MessageIds,
) -> ctxlog::Result<Received> {
    let (raw, v03) = (message.raw, message.v03);
    match (message.push, v03) {
        (Some(push), _) => store.receive_with_push(tenant, raw, ids, v03, push.with_message()),
        (None, false) => store
            .receive_message_with(tenant, raw, ids)
            .map(|r| (r, None)),
        (None, true) => store
            .receive_v03_message(tenant, raw, ids)
            .map(|r| (r, None)),
    }
}

/// Looks the message up as received before, in v1.0's form or (`v03`)
/// one of v0.3's.
fn find_received(
    store: &ctxlog::Store,
    tenant: &str,
    raw: &[u8],
    v03: bool,
) -> ctxlog::Result<Option<Receipt>> {
    match v03 {
        false => store.find_received(tenant, raw),
        true => store.find_received_v03(tenant, raw),
    }
}

/// Whether the message names a task whose turn ended in a direct reply.
fn names_direct_reply(store: &ctxlog::Store, tenant: &str, raw: &[u8]) -> bool {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Named {
        task_id: Option<String>,
    }
    serde_json::from_slice::<Named>(raw)
        .ok()
        .and_then(|n| n.task_id)
        .and_then(|id| store.task_progress(tenant, &id).ok())
        .is_some_and(|p| p.direct_reply)
}

fn start_turn(
    shared: &Arc<Shared>,
    tenant: &str,
    receipt: &Receipt,
    lease: Option<TurnGuard>,
    permit: OwnedSemaphorePermit,
    prepared: Option<turn::Prepared>,
) {
    shared
        .hub
        .notify_received(tenant, &receipt.task_id, receipt.event);
    turn::start(shared, tenant, receipt, lease, permit, prepared);
}

/// Under the single-active-turn policy: a resend is answered as one; a
/// message to a context whose turn is running is refused before anything
/// is stored; otherwise the message is received and the context's turn
/// taken, all under the context's lock.
fn receive_single(
    store: &ctxlog::Store,
    shared: &Shared,
    tenant: &str,
    message: &Incoming<'_>,
    ids: MessageIds,
) -> ctxlog::Result<(Received, Option<TurnGuard>)> {
    let (raw, v03) = (message.raw, message.v03);
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Named {
        context_id: Option<String>,
        task_id: Option<String>,
    }
    let named: Option<Named> = serde_json::from_slice(raw).ok();
    let context = match named {
        Some(Named {
            context_id: Some(c),
            ..
        }) => Some(c),
        Some(Named {
            task_id: Some(t), ..
        }) => store
            .get_task(tenant, &t, Some(0), false)
            .ok()
            .map(|task| task.context_id),
        _ => None,
    };
    let Some(context) = context else {
        // A new context (nobody holds its turn), or a resend.
        let received = receive(store, tenant, message, ids)?;
        if received.0.duplicate {
            return Ok((received, None));
        }
        let receipt = &received.0;
        let lease = store.begin_turn(tenant, &receipt.context_id, &receipt.task_id)?;
        return Ok((received, Some(lease)));
    };
    shared.context_locks.with(tenant, &context, || {
        if ids == MessageIds::Idempotent {
            if let Some(receipt) = find_received(store, tenant, raw, v03)? {
                return Ok(((receipt, None), None));
            }
        }
        if let Some((task_id, since_ms)) = store.turn_holder(tenant, &context)? {
            return Err(ctxlog::Error::ContextBusy { task_id, since_ms });
        }
        let received = receive(store, tenant, message, ids)?;
        let receipt = &received.0;
        let lease = store.begin_turn(tenant, &receipt.context_id, &receipt.task_id)?;
        Ok((received, Some(lease)))
    })
}
