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

use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;

use crate::error::{Error, Result};
use crate::options::Target;

mod control;
mod follow;
mod objects;
mod remote;
mod restore;
mod ship;
mod shipper;

pub use crate::options::Replicate;
pub use crate::store::ReplicationStatus;
pub use follow::Follower;
/// The `object_store` crate this build replicates with, for making an
/// object store to pass to [`Replicate::to_store`] (its `InMemory`, say).
pub use object_store;
pub use objects::Heartbeat;
pub use restore::{check_points, restore, restore_points, RestorePoint, RestoreReport};

impl Replicate {
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
