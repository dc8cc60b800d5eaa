//! Where and how a store replicates ([`Options::replicate`](super::Options::replicate)):
//! the configuration only; `replicate/` attaches the thread it describes
//! (feature `replicate`; DESIGN.md §13).

use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;

/// Where and how a store replicates (see [`Options::replicate`](crate::Options::replicate)).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Replicate {
    pub(crate) target: Target,
    /// How often the shipper looks for new bytes to ship and publishes a
    /// restore point: the bound on how far the replica trails the store
    /// while the object store keeps up. Default: 1 s.
    pub interval: Duration,
    /// A round also starts as soon as this many bytes were synced since
    /// the newest restore point's view, without waiting for the interval
    /// (so the replica trails by at most about this many bytes while the
    /// object store keeps up). Default: 8 MiB.
    pub batch_bytes: u64,
    /// How long restore points are kept for a restore to a point in time
    /// (the newest is always kept), and how long objects the log no
    /// longer uses (segments merged away) stay for them. Default: 24 h.
    pub retain: Duration,
    /// How long a close (or drop) waits for the last shipment. Default:
    /// 10 s; past it the close returns and says so in the log.
    pub close_timeout: Duration,
    /// Synchronous replication: every write returns only once a restore
    /// point covers it (appenders waiting together share one round, so one
    /// piece and one restore point). Default: `false` (asynchronous: the
    /// replica trails by up to about one interval). Needs
    /// `Durability::Sync` or `GroupCommit` (only synced bytes are shipped).
    pub synchronous: bool,
    /// With [`synchronous`](Self::synchronous), how long a write waits for
    /// its restore point before it fails with
    /// [`Error::Replica`](crate::Error::Replica): it is then stored and
    /// durable on this disk, only not known to be in the replica (a resend
    /// of an A2A message is recognised). Default: 10 s.
    pub sync_timeout: Duration,
    /// Asynchronous replication's lease: a write is acknowledged only while
    /// a round that began at most this long ago found no other writer's
    /// claim, and a writer that claims the replica from another waits this
    /// long before its first round ends (so before any write of its is
    /// acknowledged). So an old writer that cannot reach the object store,
    /// or was paused, stops acknowledging before a new one starts
    /// (DESIGN.md §13, "The lease"). Past it, a write fails with
    /// [`Error::Replica`](crate::Error::Replica): it is stored and durable
    /// on this disk. `None`: no lease (writes are acknowledged whatever the replica's state, and
    /// a writer cut off from the object store writes beside a promoted
    /// standby until it next reaches it). Default: 5 s. Unused with
    /// [`synchronous`](Self::synchronous), whose writes wait for their
    /// restore point.
    pub lease: Option<Duration>,
    /// How long a round may take before it counts as failed (an object
    /// store that hangs rather than answers). Default: 30 s.
    pub round_timeout: Duration,
}

/// Where a replica lies.
#[derive(Clone, Debug)]
pub(crate) enum Target {
    Url(String),
    Store(Arc<dyn ObjectStore>, String),
}

impl Replicate {
    /// Replicate to `url`: a local directory (a path, or `file:///path`),
    /// or with the `replicate-s3` feature `s3://bucket/prefix` (the
    /// credentials, region and endpoint from the usual `AWS_*` variables,
    /// as `object_store`'s `AmazonS3Builder::from_env` reads them); with
    /// `replicate-gcs`, `gs://bucket/prefix` (`GOOGLE_*`); with
    /// `replicate-azure`, `az://container/prefix` (`AZURE_*`).
    pub fn to(url: &str) -> Self {
        Self::with(Target::Url(url.to_string()))
    }

    /// Replicate to an object store made by the caller (an `InMemory` one in
    /// tests, or one configured beyond what a URL says), under `prefix`
    /// (`""`: at its root).
    pub fn to_store(store: Arc<dyn ObjectStore>, prefix: &str) -> Self {
        Self::with(Target::Store(store, prefix.to_string()))
    }

    fn with(target: Target) -> Self {
        Self {
            target,
            interval: Duration::from_secs(1),
            batch_bytes: 8 << 20,
            retain: Duration::from_secs(24 * 3600),
            close_timeout: Duration::from_secs(10),
            synchronous: false,
            sync_timeout: Duration::from_secs(10),
            lease: Some(Duration::from_secs(5)),
            round_timeout: Duration::from_secs(30),
        }
    }

    /// Sets [`synchronous`](Self::synchronous).
    pub fn synchronous(mut self, synchronous: bool) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// Sets [`sync_timeout`](Self::sync_timeout).
    pub fn sync_timeout(mut self, timeout: Duration) -> Self {
        self.sync_timeout = timeout;
        self
    }

    /// Sets [`interval`](Self::interval) (at least 1 ms).
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval.max(Duration::from_millis(1));
        self
    }

    /// Sets [`batch_bytes`](Self::batch_bytes) (at least 1).
    pub fn batch_bytes(mut self, bytes: u64) -> Self {
        self.batch_bytes = bytes.max(1);
        self
    }

    /// Sets [`retain`](Self::retain).
    pub fn retain(mut self, retain: Duration) -> Self {
        self.retain = retain;
        self
    }

    /// Sets [`lease`](Self::lease). Keep it at least twice the interval:
    /// after a quiet stretch longer than the lease, a write waits for a
    /// round to renew it.
    pub fn lease(mut self, lease: Option<Duration>) -> Self {
        self.lease = lease;
        self
    }

    /// Sets [`round_timeout`](Self::round_timeout).
    pub fn round_timeout(mut self, timeout: Duration) -> Self {
        self.round_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The lease in force: none with synchronous replication.
    pub(crate) fn lease_in_force(&self) -> Option<Duration> {
        self.lease.filter(|_| !self.synchronous)
    }

    /// Sets [`close_timeout`](Self::close_timeout).
    pub fn close_timeout(mut self, timeout: Duration) -> Self {
        self.close_timeout = timeout;
        self
    }

    /// Where it replicates, for messages (the URL, or the object store's
    /// own description and the prefix).
    pub fn describe(&self) -> String {
        match &self.target {
            Target::Url(url) => url.clone(),
            Target::Store(store, prefix) => format!("{store}/{prefix}"),
        }
    }
}
