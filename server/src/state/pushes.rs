//! The registry of push deliveries under way: one per (tenant, task,
//! config), each with a stop signal and what `/healthz` shows of it (how
//! many failures in a row, whether it is marked failing, the last error).
//! An entry lives exactly while its delivery task runs: what the registry
//! holds is bounded by the configs of unfinished deliveries.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::util::lock;
use crate::webhook::Target;

/// Which delivery: tenant, task id, config id.
pub(crate) type DeliveryKey = (String, String, String);

/// The deliveries under way.
pub(crate) struct Pushes {
    deliveries: Mutex<HashMap<DeliveryKey, Arc<Delivery>>>,
    /// Bounds the requests to webhooks in flight at once.
    pub(crate) in_flight: Arc<Semaphore>,
    /// Bounds, apart, the retries of deliveries whose last attempt failed:
    /// receivers that hang until the timeout cannot take every place from
    /// the healthy ones.
    pub(crate) retrying: Arc<Semaphore>,
    /// Idle connections to webhooks, shared by every delivery.
    pub(crate) pool: crate::webhook::Pool,
    /// Places per host and port (a quarter of all), so that one receiver
    /// that hangs holds up no more than its share of the others; an entry
    /// lives while some request to its host holds or awaits a place.
    hosts: Mutex<HashMap<(String, u16, bool), Arc<Semaphore>>>,
    per_host: usize,
    /// Hosts whose last request failed, and when: every request to one
    /// (a new config's first included) takes a retry place until a
    /// request to it succeeds, or [`TROUBLE_FOR`] passes without a
    /// failure. So hosts that hang hold the retry places, never the
    /// healthy ones', however many configs name them.
    troubled: Mutex<HashMap<(String, u16, bool), Instant>>,
}

/// How long a host that failed is taken for troubled after its last
/// failure.
const TROUBLE_FOR: Duration = Duration::from_secs(300);

/// A place for one request to one host; given back, and its host's entry
/// let go when nobody else wants it, when dropped.
pub(crate) struct HostPlace<'a> {
    pushes: &'a Pushes,
    key: (String, u16, bool),
    permit: Option<OwnedSemaphorePermit>,
}

impl Drop for HostPlace<'_> {
    fn drop(&mut self) {
        drop(self.permit.take());
        let mut hosts = lock(&self.pushes.hosts);
        // The map's own reference is the last one: nobody holds or awaits
        // a place of this host.
        if hosts
            .get(&self.key)
            .is_some_and(|s| Arc::strong_count(s) == 1)
        {
            hosts.remove(&self.key);
        }
    }
}

/// One delivery under way.
#[derive(Default)]
pub(crate) struct Delivery {
    stopped: AtomicBool,
    /// Wakes the delivery when it is stopped.
    pub(crate) stop: Notify,
    /// How it goes.
    pub(crate) health: Mutex<Health>,
}

/// How a delivery goes.
#[derive(Debug, Default, Clone)]
pub(crate) struct Health {
    /// Failed attempts since the last success.
    pub(crate) failures: u32,
    /// Past the failures allowed: retried at the slow pace.
    pub(crate) failing: bool,
    /// Why the last attempt failed.
    pub(crate) last_error: Option<String>,
    /// The last event seq acknowledged.
    pub(crate) delivered: u64,
}

impl Delivery {
    /// Whether the delivery was told to stop.
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Waits until the delivery is told to stop.
    pub(crate) async fn stopped(&self) {
        loop {
            let notified = self.stop.notified();
            if self.is_stopped() {
                return;
            }
            notified.await;
        }
    }
}

impl Pushes {
    /// A registry that lets `webhooks.max_in_flight` requests out at
    /// once, and a quarter as many retries beside them.
    pub(crate) fn new(webhooks: &crate::config::Webhooks) -> Self {
        let max_in_flight = webhooks.max_in_flight;
        Pushes {
            deliveries: Mutex::default(),
            in_flight: Arc::new(Semaphore::new(max_in_flight.max(1))),
            retrying: Arc::new(Semaphore::new((max_in_flight / 4).max(1))),
            hosts: Mutex::default(),
            per_host: (max_in_flight / 4).max(1),
            pool: crate::webhook::Pool::new(webhooks.ca_file.clone()),
            troubled: Mutex::default(),
        }
    }

    /// Whether a request to `target`'s host failed last (and lately).
    pub(crate) fn troubled(&self, target: &Target) -> bool {
        lock(&self.troubled)
            .get(&target.authority())
            .is_some_and(|at| at.elapsed() < TROUBLE_FOR)
    }

    /// Notes how a request to `target`'s host went: a success clears its
    /// trouble, a failure marks it (and lets go of marks that are old).
    pub(crate) fn note(&self, target: &Target, succeeded: bool) {
        let mut troubled = lock(&self.troubled);
        if succeeded {
            troubled.remove(&target.authority());
        } else {
            troubled.retain(|_, at| at.elapsed() < TROUBLE_FOR);
            troubled.insert(target.authority(), Instant::now());
        }
    }

    /// Waits for a place for a request to `target`'s host and port.
    pub(crate) async fn host_place(&self, target: &Target) -> HostPlace<'_> {
        let key = target.authority();
        let places = lock(&self.hosts)
            .entry(key.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_host)))
            .clone();
        let mut place = HostPlace {
            pushes: self,
            key,
            permit: None,
        };
        // The semaphore is never closed.
        place.permit = places.acquire_owned().await.ok();
        place
    }

    /// Hosts with a request under way or waiting.
    pub(crate) fn hosts(&self) -> usize {
        lock(&self.hosts).len()
    }

    /// Registers a delivery for `key`, stopping one that runs for it (a
    /// config replaced): the new one is the only one delivering.
    pub(crate) fn start(&self, key: DeliveryKey) -> Arc<Delivery> {
        let delivery = Arc::new(Delivery::default());
        if let Some(old) = lock(&self.deliveries).insert(key, delivery.clone()) {
            stop(&old);
        }
        delivery
    }

    /// Whether a delivery runs for `key`.
    pub(crate) fn running(&self, key: &DeliveryKey) -> bool {
        lock(&self.deliveries).contains_key(key)
    }

    /// Stops the delivery for `key`, if one runs (a config deleted).
    pub(crate) fn stop(&self, key: &DeliveryKey) {
        if let Some(old) = lock(&self.deliveries).remove(key) {
            stop(&old);
        }
    }

    /// The delivery for `key` ended: its entry goes, unless another
    /// replaced it.
    pub(crate) fn finish(&self, key: &DeliveryKey, delivery: &Arc<Delivery>) {
        let mut deliveries = lock(&self.deliveries);
        if deliveries
            .get(key)
            .is_some_and(|d| Arc::ptr_eq(d, delivery))
        {
            deliveries.remove(key);
        }
    }

    /// What `/healthz` shows (it answers without a token): the deliveries
    /// under way and how many are marked failing; with `detail` (a server
    /// without tokens, whose one tenant is its operator's), the first
    /// [`FAILING_SHOWN`] of those, each with its tenant, task, config,
    /// failures and the kind of its last error (never its URL, host or
    /// credentials: the log has the whole error).
    pub(crate) fn report(&self, detail: bool) -> serde_json::Value {
        let deliveries = lock(&self.deliveries);
        let mut failing_count = 0usize;
        let mut failing: Vec<serde_json::Value> = Vec::new();
        for ((tenant, task_id, config_id), d) in deliveries.iter() {
            let health = lock(&d.health).clone();
            if !health.failing {
                continue;
            }
            failing_count += 1;
            if detail && failing.len() < FAILING_SHOWN {
                failing.push(serde_json::json!({
                    "tenant": tenant,
                    "taskId": task_id,
                    "configId": config_id,
                    "failures": health.failures,
                    "lastError": health.last_error.as_deref().map(error_kind),
                    "delivered": health.delivered,
                }));
            }
        }
        let mut report = serde_json::json!({
            "deliveries": deliveries.len(),
            "failingCount": failing_count,
            "hostsBusy": self.hosts(),
        });
        if detail {
            report["failing"] = failing.into();
        }
        report
    }
}

/// How many failing configs `/healthz` lists at most.
const FAILING_SHOWN: usize = 20;

/// The kind of a delivery's error, for `/healthz`: what went wrong, with
/// no address, host or URL in it.
fn error_kind(error: &str) -> String {
    let kind = if error.starts_with("HTTP ") {
        // "HTTP 500 Internal Server Error", or a redirect's whole
        // message: the answer's status, nothing of the URL.
        return error.chars().take(120).collect();
    } else if error.starts_with("no answer within") {
        "no answer within the timeout"
    } else if error.contains("does not resolve") || error.contains("resolves to no address") {
        "the host does not resolve"
    } else if error.contains("is not a public address") {
        "not a public address"
    } else if error.starts_with("cannot connect") {
        "cannot connect"
    } else if error.contains("TLS") {
        "TLS handshake failed"
    } else {
        "the delivery failed"
    };
    kind.to_string()
}

fn stop(delivery: &Delivery) {
    delivery.stopped.store(true, Ordering::Release);
    delivery.stop.notify_waiters();
}
