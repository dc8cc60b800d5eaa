//! Replication to object storage and restores from it: a restored store
//! holds, byte for byte, the log its restore point names; damaged or
//! missing objects are refused; another store's replica is never written
//! over; retention keeps what a restore needs.
//!
//! Each scenario runs on a local directory or an in-memory object store,
//! and (ignored unless asked for, with `--ignored`) on an S3 endpoint:
//! `.ci/run` starts moto's server on 127.0.0.1 and sets `CTXLOG_TEST_S3`
//! and the `AWS_*` variables. Asked for without them, they fail.
#![cfg(feature = "replicate")]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ctxlog::replicate::object_store::memory::InMemory;
use ctxlog::replicate::object_store::path::Path as ObjectPath;
use ctxlog::replicate::object_store::{ObjectStore, PutPayload};
use ctxlog::replicate::{restore, restore_points};
use ctxlog::{Error, Options, Replicate, Store};

const WAIT: Duration = Duration::from_secs(20);
/// The lease of the tests that take a replica over (each takeover waits
/// it out).
const LEASE: Duration = Duration::from_millis(300);

/// Where a test's replica lies.
enum Place {
    Dir(tempfile::TempDir),
    Memory(Arc<InMemory>),
    #[cfg_attr(not(feature = "replicate-s3"), allow(dead_code))]
    S3(String),
}

impl Place {
    fn dir() -> Self {
        Place::Dir(tempfile::tempdir().unwrap())
    }

    fn memory() -> Self {
        Place::Memory(Arc::new(InMemory::new()))
    }

    /// A fresh prefix of the bucket `CTXLOG_TEST_S3` names.
    #[cfg(feature = "replicate-s3")]
    fn s3() -> Self {
        let bucket = std::env::var("CTXLOG_TEST_S3").expect(
            "CTXLOG_TEST_S3 names the bucket of an S3 endpoint (with AWS_ENDPOINT_URL and the \
             other AWS_* variables); .ci/run starts one",
        );
        let unique = format!("{}-{:x}", std::process::id(), rand_u64());
        Place::S3(format!("s3://{bucket}/{unique}"))
    }

    fn url(&self) -> String {
        match self {
            Place::Dir(dir) => dir.path().to_str().unwrap().to_string(),
            Place::Memory(_) => unreachable!("an in-memory store has no URL"),
            Place::S3(url) => url.clone(),
        }
    }

    fn replicate(&self) -> Replicate {
        match self {
            Place::Memory(store) => Replicate::to_store(store.clone(), "stores/one"),
            _ => Replicate::to(&self.url()),
        }
    }

    /// The object store and the replica's prefix in it, to look at or
    /// damage objects.
    fn objects(&self) -> (Arc<dyn ObjectStore>, ObjectPath) {
        match self {
            Place::Dir(dir) => (
                Arc::new(
                    ctxlog::replicate::object_store::local::LocalFileSystem::new_with_prefix(
                        dir.path(),
                    )
                    .unwrap(),
                ),
                ObjectPath::default(),
            ),
            Place::Memory(store) => (store.clone(), ObjectPath::from("stores/one")),
            Place::S3(url) => s3_objects(url),
        }
    }

    /// The names of the objects under `sub`, sorted.
    fn listed(&self, sub: &str) -> Vec<String> {
        let (store, root) = self.objects();
        let mut names: Vec<String> = block_on(async {
            use futures::TryStreamExt;
            store
                .list(Some(&root.child(sub)))
                .try_collect::<Vec<_>>()
                .await
                .unwrap()
        })
        .into_iter()
        .map(|m| m.location.filename().unwrap().to_string())
        .collect();
        names.sort();
        names
    }

    fn get(&self, sub: &str, name: &str) -> Vec<u8> {
        let (store, root) = self.objects();
        let path = root.child(sub).child(name);
        block_on(async {
            store
                .get(&path)
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap()
                .to_vec()
        })
    }

    fn put(&self, sub: &str, name: &str, bytes: Vec<u8>) {
        let (store, root) = self.objects();
        let path = root.child(sub).child(name);
        block_on(async { store.put(&path, PutPayload::from(bytes)).await.unwrap() });
    }

    fn delete(&self, sub: &str, name: &str) {
        let (store, root) = self.objects();
        let path = root.child(sub).child(name);
        block_on(async { store.delete(&path).await.unwrap() });
    }
}

#[cfg(feature = "replicate-s3")]
fn s3_objects(url: &str) -> (Arc<dyn ObjectStore>, ObjectPath) {
    let rest = url.strip_prefix("s3://").unwrap();
    let (bucket, prefix) = rest.split_once('/').unwrap();
    let store = ctxlog::replicate::object_store::aws::AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .build()
        .unwrap();
    (Arc::new(store), ObjectPath::from(prefix))
}

#[cfg(not(feature = "replicate-s3"))]
fn s3_objects(_url: &str) -> (Arc<dyn ObjectStore>, ObjectPath) {
    unreachable!("S3 places need the replicate-s3 feature")
}

#[cfg(feature = "replicate-s3")]
fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::time::UNIX_EPOCH.elapsed().unwrap().as_nanos() as u64);
    h.finish()
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Small segments, so a few hundred records span several, and no
/// background maintenance (the tests compact when they mean to).
fn options(replicate: Replicate) -> Options {
    let mut options = Options::default().maintenance(None).replicate(replicate);
    options.segment_bytes = 8 << 10;
    options
}

fn write(store: &Store, from: usize, to: usize) {
    for i in from..to {
        let context = format!("case-{}", i % 7);
        store
            .append_message(
                "acme",
                &context,
                format!("message {i} {}", "x".repeat(i % 300)).as_bytes(),
            )
            .unwrap();
    }
}

/// The store's segment files, manifest and identity, by name.
fn log_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.ends_with(".seg") || name == "MANIFEST" || name == "IDENTITY"
        })
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

/// Every context's records, as an export gives them.
fn contents(dir: &Path) -> Vec<ctxlog::Item> {
    let store = Store::open(dir, Options::default().maintenance(None).create(false)).unwrap();
    let mut items = Vec::new();
    for i in 0..7 {
        if let Ok(mut found) = store.export_context("acme", &format!("case-{i}")) {
            items.append(&mut found);
        }
    }
    store.close().unwrap();
    items
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn closed_store_restores_byte_for_byte(place: Place) {
    let (dir, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let to = || place.replicate().interval(Duration::from_millis(5));
    let store = Store::open(dir.path(), options(to())).unwrap();
    write(&store, 0, 400);
    store.compact().unwrap();
    write(&store, 400, 600);
    assert!(store.stats().segments > 2);
    store.close().unwrap();

    let restored = out.path().join("restored");
    let report = restore(&to(), &restored, None).unwrap();
    assert!(report.segments > 2 && report.records >= 600, "{report:?}");
    assert_eq!(log_files(dir.path()), log_files(&restored));
    let items = contents(&restored);
    assert_eq!(items.len(), 600);
    assert_eq!(items, contents(dir.path()));
}

fn restore_points_in_time(place: Place) {
    let to = || place.replicate().interval(Duration::from_secs(3600));
    let (dir, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let store = Store::open(dir.path(), options(to())).unwrap();
    write(&store, 0, 100);
    let first = store.ship_replica(WAIT).unwrap();
    assert_eq!(first.lag_bytes, 0);
    assert!(
        first.restore_point >= 1 && first.shipped_bytes > 0,
        "{first:?}"
    );
    // The next restore point is published strictly later.
    while now_ms() <= first.restore_point_ms {
        std::thread::yield_now();
    }
    write(&store, 100, 250);
    let second = store.ship_replica(WAIT).unwrap();
    assert!(second.restore_point > first.restore_point);
    // Nothing new: no new restore point.
    assert_eq!(
        store.ship_replica(WAIT).unwrap().restore_point,
        second.restore_point
    );

    // While the store still runs, each point restores to what was written
    // before it.
    let latest = out.path().join("latest");
    restore(&to(), &latest, None).unwrap();
    assert_eq!(contents(&latest).len(), 250);
    let earlier = out.path().join("earlier");
    let report = restore(&to(), &earlier, Some(first.restore_point_ms)).unwrap();
    assert_eq!(report.point.number, first.restore_point);
    assert_eq!(contents(&earlier).len(), 100);
    let points = restore_points(&to()).unwrap();
    assert_eq!(points.last().unwrap().number, second.restore_point);
    // Before the first point there is nothing to restore.
    let err = restore(&to(), out.path().join("none"), Some(points[0].time_ms - 1)).unwrap_err();
    assert!(err.to_string().contains("oldest restore point"), "{err}");
    store.close().unwrap();
}

fn damaged_objects_are_refused(place: Place) {
    let (dir, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let store = Store::open(dir.path(), options(place.replicate())).unwrap();
    write(&store, 0, 300);
    store.close().unwrap();
    let names = place.listed("segments");
    assert!(names.len() > 2, "{names:?}");
    let victim = names[1].clone();
    let good = place.get("segments", &victim);

    let attempt = |name: &str| {
        let target = out.path().join(name);
        let err = restore(&place.replicate(), &target, None).unwrap_err();
        assert!(matches!(err, Error::Replica { .. }), "{err}");
        assert!(!target.exists(), "a failed restore leaves no store");
        let leftovers: Vec<_> = std::fs::read_dir(out.path()).unwrap().collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        err.to_string()
    };
    let mut flipped = good.clone();
    flipped[200] ^= 1;
    place.put("segments", &victim, flipped);
    assert!(attempt("flipped").contains("checksum"));
    place.put("segments", &victim, good[..good.len() - 10].to_vec());
    assert!(attempt("cut").contains("lacks bytes"));
    place.delete("segments", &victim);
    assert!(attempt("missing").contains("lacks bytes"));
    // A damaged restore point is refused too.
    let point = place.listed("points").pop().unwrap();
    let sound = place.get("points", &point);
    let mut bad = sound.clone();
    bad[30] ^= 1;
    place.put("points", &point, bad);
    assert!(attempt("point").contains("damaged"));
    place.put("points", &point, sound);
    place.put("segments", &victim, good);
    restore(&place.replicate(), out.path().join("whole"), None).unwrap();
}

fn another_stores_replica_is_kept(place: Place) {
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = Store::open(one.path(), options(place.replicate())).unwrap();
    write(&first, 0, 10);
    first.close().unwrap();
    let second = Store::open(two.path(), options(place.replicate())).unwrap();
    // Under the lease, a write waits for the first round, which finds the
    // replica another store's: refused, saying why (it is stored here).
    let err = second
        .append_message("acme", "case-1", b"here")
        .unwrap_err();
    assert!(err.to_string().contains("another store's replica"), "{err}");
    let err = second.ship_replica(WAIT).unwrap_err();
    assert!(err.to_string().contains("another store's replica"), "{err}");
    assert!(second.replication().unwrap().last_error.is_some());
    second.close().unwrap();
    let out = tempfile::tempdir().unwrap();
    let restored = out.path().join("r");
    restore(&place.replicate(), &restored, None).unwrap();
    assert_eq!(contents(&restored).len(), 10);
}

fn a_reopened_store_goes_on(place: Place) {
    let to = || place.replicate().interval(Duration::from_secs(3600));
    let (dir, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for round in 0..3 {
        let store = Store::open(dir.path(), options(to())).unwrap();
        write(&store, round * 100, round * 100 + 50);
        store.ship_replica(WAIT).unwrap();
        write(&store, round * 100 + 50, round * 100 + 80);
        // Dropped without close: the drop ships what is left too.
        drop(store);
        let restored = out.path().join(format!("r{round}"));
        restore(&to(), &restored, None).unwrap();
        assert_eq!(log_files(dir.path()), log_files(&restored));
        std::fs::remove_dir_all(&restored).unwrap();
        // The next round's writes follow on from this one's.
        let store = Store::open(dir.path(), options(to())).unwrap();
        write(&store, round * 100 + 80, round * 100 + 100);
        store.close().unwrap();
    }
    let restored = out.path().join("last");
    restore(&to(), &restored, None).unwrap();
    assert_eq!(contents(&restored).len(), 300);
}

fn retention_keeps_what_the_newest_point_names(place: Place) {
    let (dir, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let to = || {
        place
            .replicate()
            .interval(Duration::from_secs(3600))
            .retain(Duration::ZERO)
    };
    let store = Store::open(dir.path(), options(to())).unwrap();
    write(&store, 0, 300);
    store.ship_replica(WAIT).unwrap();
    let before: Vec<u64> = restore_points(&to())
        .unwrap()
        .iter()
        .map(|p| p.number)
        .collect();
    assert_eq!(before.len(), 1);
    store.compact().unwrap();
    write(&store, 300, 320);
    // One round publishes the compacted log and marks the merged-away
    // segments retired; the next (a point later) collects them.
    store.ship_replica(WAIT).unwrap();
    write(&store, 320, 330);
    store.ship_replica(WAIT).unwrap();
    let points = restore_points(&to()).unwrap();
    assert_eq!(points.len(), 1, "{points:?}");
    assert!(points[0].number > before[0]);
    store.close().unwrap();
    // Every segment left in the bucket is one of the log's now.
    let live: Vec<String> = log_files(dir.path())
        .into_iter()
        .map(|(name, _)| name)
        .filter(|n| n.ends_with(".seg"))
        .collect();
    for name in place.listed("segments") {
        // `<id>-<epoch>.seg` in the bucket, `<id>.seg` in the store.
        let id = format!("{}.seg", name.split('-').next().unwrap());
        assert!(live.contains(&id), "{name} is not in {live:?}");
    }
    assert!(
        place.listed("retired").is_empty(),
        "{:?}",
        place.listed("retired")
    );
    let restored = out.path().join("r");
    restore(&to(), &restored, None).unwrap();
    assert_eq!(contents(&restored).len(), 330);
}

fn a_restored_copy_takes_over_and_the_old_writer_is_fenced(place: Place) {
    let to = || {
        place
            .replicate()
            .interval(Duration::from_secs(3600))
            .lease(Some(LEASE))
    };
    let (one, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let old = Store::open(one.path(), options(to())).unwrap();
    write(&old, 0, 50);
    old.ship_replica(WAIT).unwrap();

    // The copy restored from the replica replicates there: it claims it.
    let copy = out.path().join("copy");
    restore(&to(), &copy, None).unwrap();
    let new = Store::open(&copy, options(to())).unwrap();
    write(&new, 50, 70);
    new.ship_replica(WAIT).unwrap();

    // The old writer's lease lapsed (it has not confirmed since the
    // claim): its next write waits for a round, which finds the claim.
    let err = old.append_message("acme", "case-1", b"beside").unwrap_err();
    assert!(err.to_string().contains("claimed the replica"), "{err}");
    let err = old.ship_replica(WAIT).unwrap_err();
    assert!(err.to_string().contains("claimed the replica"), "{err}");
    let err = old.append_message("acme", "case-1", b"late").unwrap_err();
    assert!(matches!(err, Error::Replica { .. }), "{err}");
    assert!(err.to_string().contains("stops writing"), "{err}");
    drop(old);
    // Reopened, its log is not the replica's: it never writes there again.
    let old = Store::open(one.path(), options(to())).unwrap();
    let err = old.ship_replica(WAIT).unwrap_err();
    assert!(
        err.to_string().contains("another writer has written it"),
        "{err}"
    );
    assert!(old.append_message("acme", "case-1", b"late").is_err());
    drop(old);

    // The replica holds the new writer's log: the first 50, then its 20.
    new.close().unwrap();
    let restored = out.path().join("after");
    restore(&to(), &restored, None).unwrap();
    assert_eq!(log_files(&copy), log_files(&restored));
    let items = contents(&restored);
    assert_eq!(items.len(), 70);
}

fn a_follower_keeps_a_copy_that_reads_and_then_takes_over(place: Place) {
    let to = || {
        place
            .replicate()
            .interval(Duration::from_secs(3600))
            .lease(Some(LEASE))
    };
    let (one, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let writer = Store::open(one.path(), options(to())).unwrap();
    write(&writer, 0, 100);
    writer.ship_replica(WAIT).unwrap();
    let copy = out.path().join("copy");
    let mut follower = ctxlog::replicate::Follower::start(&to(), &copy).unwrap();
    let first = follower.point().unwrap();
    assert!(!follower.catch_up().unwrap(), "nothing new yet");
    let read = || {
        let store = Store::open_read_only(&copy, Options::default()).unwrap();
        let n: usize = (0..7)
            .map(|i| {
                store
                    .export_context("acme", &format!("case-{i}"))
                    .map_or(0, |items| items.len())
            })
            .sum();
        n
    };
    assert_eq!(read(), 100);
    // Appends, new segments, a merge: each caught up in turn.
    write(&writer, 100, 250);
    writer.ship_replica(WAIT).unwrap();
    assert!(follower.catch_up().unwrap());
    assert!(follower.point().unwrap().number > first.number);
    assert_eq!(read(), 250);
    writer.compact().unwrap();
    write(&writer, 250, 300);
    writer.ship_replica(WAIT).unwrap();
    assert!(follower.catch_up().unwrap());
    assert_eq!(read(), 300);
    // The copy holds the writer's log byte for byte (whose active segment
    // goes on in zeros while it is open).
    let logs = |dir: &Path| {
        log_files(dir)
            .into_iter()
            .filter(|(name, _)| name.ends_with(".seg") || name == "MANIFEST")
            .collect::<Vec<_>>()
    };
    let (theirs, ours) = (logs(one.path()), logs(&copy));
    let names = |files: &[(String, Vec<u8>)]| files.iter().map(|f| f.0.clone()).collect::<Vec<_>>();
    assert_eq!(names(&theirs), names(&ours));
    for ((name, w), (_, c)) in theirs.iter().zip(&ours) {
        let same = w.starts_with(c) && w[c.len()..].iter().all(|&b| b == 0);
        assert!(same, "{name}: {} bytes here, {} there", c.len(), w.len());
    }

    // A checkpoint written into the copy changes none of its log, and the
    // next read-only open replays nothing.
    let before = logs(&copy);
    follower.checkpoint().unwrap();
    assert_eq!(before, logs(&copy));
    let store = Store::open_read_only(&copy, Options::default()).unwrap();
    assert_eq!(store.open_report().replayed, 0);
    assert!(store.open_report().from_checkpoint);
    drop(store);
    assert!(!follower.catch_up().unwrap());

    // Promoted: the copy opened with replication claims the replica.
    drop(follower);
    let promoted = Store::open(&copy, options(to())).unwrap();
    promoted.ship_replica(WAIT).unwrap();
    write(&promoted, 300, 310);
    promoted.ship_replica(WAIT).unwrap();
    assert!(writer.append_message("acme", "case-1", b"beside").is_err());
    assert!(writer.ship_replica(WAIT).is_err());
    assert!(writer.append_message("acme", "case-1", b"late").is_err());
    drop(writer);
    promoted.close().unwrap();
    let restored = out.path().join("after");
    restore(&to(), &restored, None).unwrap();
    assert_eq!(contents(&restored).len(), 310);
}

#[test]
fn a_follower_of_a_directory_replica_reads_and_takes_over() {
    a_follower_keeps_a_copy_that_reads_and_then_takes_over(Place::dir());
}

#[test]
fn a_restored_copy_takes_over_a_directory_replica() {
    a_restored_copy_takes_over_and_the_old_writer_is_fenced(Place::dir());
}

#[test]
fn a_restored_copy_takes_over_an_in_memory_replica() {
    a_restored_copy_takes_over_and_the_old_writer_is_fenced(Place::memory());
}

#[test]
fn a_closed_store_restores_byte_for_byte_from_a_directory() {
    closed_store_restores_byte_for_byte(Place::dir());
}

#[test]
fn a_running_store_ships_its_synced_bytes_and_a_restore_point_in_time_holds_only_what_came_before()
{
    restore_points_in_time(Place::memory());
}

#[test]
fn damaged_cut_or_missing_objects_are_refused_and_leave_nothing_behind() {
    damaged_objects_are_refused(Place::dir());
}

#[test]
fn a_second_store_never_writes_over_another_stores_replica() {
    another_stores_replica_is_kept(Place::memory());
}

#[test]
fn a_reopened_store_goes_on_from_its_replicas_last_point() {
    a_reopened_store_goes_on(Place::memory());
}

#[test]
fn past_the_retention_window_only_the_newest_point_and_what_it_names_are_kept() {
    retention_keeps_what_the_newest_point_names(Place::dir());
}

#[test]
fn tenants_partitioned_across_two_writers_restore_apart() {
    let bucket: Arc<InMemory> = Arc::new(InMemory::new());
    let node = |n: &str| Replicate::to_store(bucket.clone(), &format!("nodes/{n}"));
    let (one, two, out) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    // Tenants routed by name: acme to node 1, zeta to node 2.
    let first = Store::open(one.path(), options(node("1"))).unwrap();
    let second = Store::open(two.path(), options(node("2"))).unwrap();
    first.append_message("acme", "case-1", b"for acme").unwrap();
    second
        .append_message("zeta", "case-1", b"for zeta")
        .unwrap();
    first.close().unwrap();
    second.close().unwrap();
    for (n, tenant, other) in [("1", "acme", "zeta"), ("2", "zeta", "acme")] {
        let restored = out.path().join(n);
        restore(&node(n), &restored, None).unwrap();
        let store = Store::open_read_only(&restored, Options::default()).unwrap();
        let mine = store.last_messages(tenant, "case-1", 10).unwrap();
        assert_eq!(mine[0].raw, format!("for {tenant}").as_bytes());
        // A request for the other node's tenant finds nothing here.
        assert!(matches!(
            store.last_messages(other, "case-1", 10),
            Err(Error::ContextNotFound)
        ));
    }
    // Each node's replica is its own: node 2 never writes into node 1's.
    let again = Store::open(two.path(), options(node("1"))).unwrap();
    let err = again.ship_replica(WAIT).unwrap_err();
    assert!(err.to_string().contains("another store's replica"), "{err}");
}

#[test]
fn a_batch_of_bytes_starts_a_round_before_the_interval() {
    let bucket: Arc<InMemory> = Arc::new(InMemory::new());
    // An hour's interval: only the batch can start a round.
    let to = Replicate::to_store(bucket.clone(), "b")
        .interval(Duration::from_secs(3600))
        .batch_bytes(64 << 10);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(to)).unwrap();
    // Under the batch: no round.
    store
        .append_message("acme", "case-1", &[b'x'; 1000])
        .unwrap();
    let page = vec![b'y'; 4096];
    for _ in 0..40 {
        store.append_message("acme", "case-1", &page).unwrap();
    }
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let status = store.replication().unwrap();
        if status.restore_point >= 1 {
            assert!(status.rounds >= 1, "{status:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no round began: {status:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(store);
}

#[test]
fn a_store_without_replication_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert!(store.replication().is_none());
    let err = store.ship_replica(WAIT).unwrap_err();
    assert!(
        err.to_string().contains("without Options::replicate"),
        "{err}"
    );
}

#[cfg(feature = "cli")]
fn command_line_restores(place: Place) {
    let (dir, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = match &place {
        Place::Dir(d) => format!("file://{}", d.path().display()),
        _ => place.url(),
    };
    let store = Store::open(dir.path(), options(Replicate::to(&url))).unwrap();
    write(&store, 0, 50);
    store.close().unwrap();
    let ctxlog = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_ctxlog"))
            .args(args)
            .current_dir(out.path())
            .output()
            .unwrap()
    };
    let listed = ctxlog(&["restore", &url, "--list"]);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(listed.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.last().unwrap()["restorePoint"].as_u64().unwrap() >= 1);
    let restored = ctxlog(&["restore", &url, "restored"]);
    assert!(
        restored.status.success(),
        "{}",
        String::from_utf8_lossy(&restored.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&restored.stdout).unwrap();
    assert_eq!(report["records"], 50);
    assert_eq!(contents(&out.path().join("restored")).len(), 50);
    // Not over a store.
    let again = ctxlog(&["restore", &url, "restored"]);
    assert_eq!(again.status.code(), Some(1));
    let stderr = String::from_utf8(again.stderr).unwrap();
    assert!(
        stderr.starts_with("error: InvalidParams: invalid dir:") && stderr.contains("not empty"),
        "{stderr}"
    );
}

#[cfg(feature = "cli")]
#[test]
fn the_command_line_lists_restore_points_and_restores() {
    command_line_restores(Place::dir());
}

/// The same scenarios against an S3 endpoint (moto's server in CI).
#[cfg(feature = "replicate-s3")]
mod s3 {
    use super::*;

    #[test]
    #[ignore = "needs an S3 endpoint: .ci/run starts moto's server and runs these"]
    fn closed_store_restores_byte_for_byte_from_s3() {
        closed_store_restores_byte_for_byte(Place::s3());
    }

    #[test]
    #[ignore = "needs an S3 endpoint: .ci/run starts moto's server and runs these"]
    fn restore_points_in_time_from_s3() {
        restore_points_in_time(Place::s3());
    }

    #[test]
    #[ignore = "needs an S3 endpoint: .ci/run starts moto's server and runs these"]
    fn damaged_objects_in_s3_are_refused() {
        damaged_objects_are_refused(Place::s3());
    }

    #[test]
    #[ignore = "needs an S3 endpoint: .ci/run starts moto's server and runs these"]
    fn another_stores_replica_in_s3_is_kept() {
        another_stores_replica_is_kept(Place::s3());
    }

    #[test]
    #[ignore = "needs an S3 endpoint: .ci/run starts moto's server and runs these"]
    fn a_reopened_store_goes_on_in_s3() {
        a_reopened_store_goes_on(Place::s3());
    }

    #[test]
    #[ignore = "needs an S3 endpoint: .ci/run starts moto's server and runs these"]
    fn retention_in_s3() {
        retention_keeps_what_the_newest_point_names(Place::s3());
    }

    #[test]
    #[ignore = "needs an S3 endpoint: .ci/run starts moto's server and runs these"]
    fn a_follower_of_an_s3_replica_reads_and_takes_over() {
        a_follower_keeps_a_copy_that_reads_and_then_takes_over(Place::s3());
    }

    #[test]
    #[ignore = "needs an S3 endpoint: .ci/run starts moto's server and runs these"]
    fn a_restored_copy_takes_over_an_s3_replica() {
        a_restored_copy_takes_over_and_the_old_writer_is_fenced(Place::s3());
    }

    #[cfg(feature = "cli")]
    #[test]
    #[ignore = "needs an S3 endpoint: .ci/run starts moto's server and runs these"]
    fn the_command_line_restores_from_s3() {
        command_line_restores(Place::s3());
    }
}

#[test]
fn a_synchronous_write_returns_only_once_a_restore_point_covers_it() {
    let bucket: Arc<InMemory> = Arc::new(InMemory::new());
    // The interval is an hour: only the writes' own requests make rounds.
    let to = || {
        Replicate::to_store(bucket.clone(), "s")
            .interval(Duration::from_secs(3600))
            .synchronous(true)
    };
    let (dir, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let store = Arc::new(
        Store::open(
            dir.path(),
            options(to()).durability(ctxlog::Durability::GroupCommit),
        )
        .unwrap(),
    );
    for i in 0..20 {
        store
            .append_message("acme", &format!("case-{}", i % 7), b"alone")
            .unwrap();
        // Each returned write is in a restore point already.
        assert_eq!(store.replication().unwrap().lag_bytes, 0);
    }
    let before = store.replication().unwrap().rounds;
    let writers: Vec<_> = (0..8)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..40 {
                    store
                        .append_message("acme", &format!("case-{}", (t + i) % 7), b"together")
                        .unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let status = store.replication().unwrap();
    assert_eq!(status.lag_bytes, 0, "{status:?}");
    // Writers waiting together shared rounds.
    assert!(status.rounds - before < 320, "{status:?}");
    // Restored while the store still runs (no close ships anything more).
    let restored = out.path().join("r");
    restore(&to(), &restored, None).unwrap();
    assert_eq!(contents(&restored).len(), 340);
    drop(store);

    // Buffered writes are never synced by themselves: refused.
    let dir = tempfile::tempdir().unwrap();
    let err = Store::open(
        dir.path(),
        options(to()).durability(ctxlog::Durability::Buffered),
    )
    .unwrap_err();
    assert!(err.to_string().contains("Durability::Buffered"), "{err}");
}
