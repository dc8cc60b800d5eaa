//! Continuous replication of a store to object storage, and restores from
//! it (feature `replicate`; DESIGN.md §13).
//!
//! A store opened with [`Options::replicate_to`](crate::Options::replicate_to)
//! ships its log, on a background thread, to an object store: each sealed
//! segment once, whole; the active segment's new synced bytes as pieces;
//! the manifest of each generation; and, after each change, a *restore
//! point* naming the segments and lengths that make up the log at that
//! moment. [`restore`] builds a store from the newest restore point, or
//! from the newest one at or before a time.
//!
//! ```
//! use ctxlog::{Options, Replicate, Store};
//! let (dir, bucket) = (tempfile::tempdir()?, tempfile::tempdir()?);
//! let options = Options::default().replicate(Replicate::to(bucket.path().to_str().unwrap()));
//! let store = Store::open(dir.path(), options)?;
//! store.append_message("acme", "case-42", b"hello")?;
//! store.close()?; // ships what is left before it returns
//!
//! let restored = dir.path().join("restored");
//! ctxlog::replicate::restore(&Replicate::to(bucket.path().to_str().unwrap()), &restored, None)?;
//! let store = Store::open(&restored, Options::default())?;
//! assert_eq!(store.last_messages("acme", "case-42", 1)?[0].raw, b"hello");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;

use crate::error::{Error, Result};

mod control;
mod follow;
mod objects;
mod remote;
mod restore;
mod ship;
mod shipper;

pub use follow::Follower;
/// The `object_store` crate this build replicates with, for making an
/// object store to pass to [`Replicate::to_store`] (its `InMemory`, say).
pub use object_store;
pub use objects::Heartbeat;
pub use restore::{check_points, restore, restore_points, RestorePoint, RestoreReport};
pub(crate) use ship::{Link, Replicator};

/// Where and how a store replicates (see [`Options::replicate`](crate::Options::replicate)).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Replicate {
    target: Target,
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
    /// its restore point before it fails with [`Error::Replica`]: it is
    /// then stored and durable on this disk, only not known to be in the
    /// replica (a resend of an A2A message is recognised). Default: 10 s.
    pub sync_timeout: Duration,
    /// Asynchronous replication's lease: a write is acknowledged only while
    /// a round that began at most this long ago found no other writer's
    /// claim, and a writer that claims the replica from another waits this
    /// long before its first round ends (so before any write of its is
    /// acknowledged). So an old writer that cannot reach the object store,
    /// or was paused, stops acknowledging before a new one starts
    /// (DESIGN.md §13, "The lease"). Past it, a write fails with
    /// [`Error::Replica`]: it is stored and durable on this disk. `None`:
    /// no lease (writes are acknowledged whatever the replica's state, and
    /// a writer cut off from the object store writes beside a promoted
    /// standby until it next reaches it). Default: 5 s. Unused with
    /// [`synchronous`](Self::synchronous), whose writes wait for their
    /// restore point.
    pub lease: Option<Duration>,
    /// How long a round may take before it counts as failed (an object
    /// store that hangs rather than answers). Default: 30 s.
    pub round_timeout: Duration,
}

#[derive(Clone, Debug)]
enum Target {
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

    /// The object store and the prefix under which the replica lies.
    pub(crate) fn open(&self) -> Result<(Arc<dyn ObjectStore>, ObjectPath)> {
        match &self.target {
            Target::Store(store, prefix) => Ok((store.clone(), prefix_path(prefix)?)),
            Target::Url(url) => open_url(url),
        }
    }
}

fn prefix_path(prefix: &str) -> Result<ObjectPath> {
    ObjectPath::parse(prefix.trim_matches('/')).map_err(|e| Error::InvalidParams {
        field: "replicate_to",
        reason: format!("the prefix {prefix:?} is not a valid object path: {e}"),
    })
}

fn open_url(url: &str) -> Result<(Arc<dyn ObjectStore>, ObjectPath)> {
    if let Some(rest) = url.strip_prefix("s3://") {
        return open_s3(url, rest);
    }
    if let Some(rest) = url.strip_prefix("gs://") {
        return open_gcs(url, rest);
    }
    if let Some(rest) = url.strip_prefix("az://") {
        return open_azure(url, rest);
    }
    if url.contains("://") && !url.starts_with("file://") {
        return Err(Error::InvalidParams {
            field: "replicate_to",
            reason: format!(
                "{url:?} names no object store this build knows; give a directory (a path or \
                 file:///path){}",
                if cfg!(feature = "replicate-s3") {
                    " or s3://bucket/prefix (gs:// and az:// with their features)"
                } else {
                    ", or build with the replicate-s3 feature for s3://"
                }
            ),
        });
    }
    let path = std::path::Path::new(url.strip_prefix("file://").unwrap_or(url));
    std::fs::create_dir_all(path)
        .map_err(|e| Error::io("make the replica's directory", path, e))?;
    let store = object_store::local::LocalFileSystem::new_with_prefix(path)
        .map_err(|e| Error::replica("open the replica's directory", e.to_string()))?;
    Ok((Arc::new(store), ObjectPath::default()))
}

/// The object store a builder made, under `prefix`.
#[cfg_attr(
    not(any(
        feature = "replicate-s3",
        feature = "replicate-gcs",
        feature = "replicate-azure"
    )),
    allow(dead_code)
)]
fn cloud<S: ObjectStore>(
    url: &str,
    prefix: &str,
    built: object_store::Result<S>,
) -> Result<(Arc<dyn ObjectStore>, ObjectPath)> {
    let store = built.map_err(|e| Error::InvalidParams {
        field: "replicate_to",
        reason: format!("{url:?}: {e}"),
    })?;
    Ok((Arc::new(store), prefix_path(prefix)?))
}

/// A URL whose scheme needs a feature this build lacks.
#[cfg_attr(
    all(
        feature = "replicate-s3",
        feature = "replicate-gcs",
        feature = "replicate-azure"
    ),
    allow(dead_code)
)]
fn missing(url: &str, service: &str, feature: &str) -> Error {
    Error::InvalidParams {
        field: "replicate_to",
        reason: format!(
            "{url:?}: this build has no {service} support; build with the {feature} feature"
        ),
    }
}

fn open_s3(url: &str, rest: &str) -> Result<(Arc<dyn ObjectStore>, ObjectPath)> {
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    #[cfg(feature = "replicate-s3")]
    return cloud(
        url,
        prefix,
        object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .build(),
    );
    #[cfg(not(feature = "replicate-s3"))]
    {
        let _ = (bucket, prefix);
        Err(missing(url, "S3", "replicate-s3"))
    }
}

fn open_gcs(url: &str, rest: &str) -> Result<(Arc<dyn ObjectStore>, ObjectPath)> {
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    #[cfg(feature = "replicate-gcs")]
    return cloud(
        url,
        prefix,
        object_store::gcp::GoogleCloudStorageBuilder::from_env()
            .with_bucket_name(bucket)
            .build(),
    );
    #[cfg(not(feature = "replicate-gcs"))]
    {
        let _ = (bucket, prefix);
        Err(missing(url, "Google Cloud Storage", "replicate-gcs"))
    }
}

/// `az://container/prefix`, the account and its key from the usual
/// `AZURE_*` variables.
fn open_azure(url: &str, rest: &str) -> Result<(Arc<dyn ObjectStore>, ObjectPath)> {
    let (container, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    #[cfg(feature = "replicate-azure")]
    return cloud(
        url,
        prefix,
        object_store::azure::MicrosoftAzureBuilder::from_env()
            .with_container_name(container)
            .build(),
    );
    #[cfg(not(feature = "replicate-azure"))]
    {
        let _ = (container, prefix);
        Err(missing(url, "Azure", "replicate-azure"))
    }
}

/// How far the replica trails the store ([`Store::replication`](crate::Store::replication)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicationStatus {
    /// Where the replica is (see [`Replicate::describe`]).
    pub target: String,
    /// Bytes synced to disk that no restore point covers yet (those
    /// synced since the newest point's view was taken).
    pub lag_bytes: u64,
    /// If there are any, how long ago the newest point's view was taken,
    /// in ms: the oldest of those bytes is younger (0: none wait). The
    /// replica holds the store as it was this long ago.
    pub lag_ms: u64,
    /// The newest restore point published (0: none yet).
    pub restore_point: u64,
    /// When it was published, in ms since the Unix epoch.
    pub restore_point_ms: u64,
    /// Bytes uploaded since the store was opened.
    pub shipped_bytes: u64,
    /// Rounds that succeeded since the store was opened: once this count
    /// has grown by two after a write was acknowledged, a round that began
    /// after it ended, so a restore point covers it.
    pub rounds: u64,
    /// Rounds that failed since the store was opened (each is retried,
    /// after a backoff).
    pub failures: u64,
    /// Why the last round failed, if it did (cleared by one that succeeds).
    pub last_error: Option<String>,
    /// Replication has stopped for good (another writer claimed the
    /// replica, or the replica is gone): `last_error` says why, and the
    /// store must be restored or pointed elsewhere to replicate again.
    pub stopped: bool,
    /// Whether a write is acknowledged now: not while fenced or stopped
    /// (under a lease), not while the lease has lapsed (asynchronous), not
    /// while rounds fail (synchronous: its writes wait for one that
    /// succeeds). `/healthz` answers 503 while it is false.
    pub acknowledging: bool,
}
