//! Replication under the faults it exists for (DESIGN.md §13): a store
//! reopened in the middle of a segment ships on at once; a wiped replica
//! stops replication with a clear error; the lag after a reopen counts
//! from what the replica holds; an object store that hangs is a failure;
//! a writer whose lease lapsed stops acknowledging.
//!
//! The server's kill-and-restore harness (`server/tests/it/replicate_faults.rs`)
//! does the same with SIGKILLs under load.
#![cfg(feature = "replicate")]

use std::sync::Arc;
use std::time::Duration;

use ctxlog::fs::{Crash, MemFs};
use ctxlog::replicate::object_store::memory::InMemory;
use ctxlog::replicate::object_store::path::Path as ObjectPath;
use ctxlog::replicate::object_store::throttle::{ThrottleConfig, ThrottledStore};
use ctxlog::replicate::object_store::ObjectStore;
use ctxlog::replicate::{check_points, restore, restore_points};
use ctxlog::{Options, Replicate, Store};

const WAIT: Duration = Duration::from_secs(20);
/// Rounds only when a test asks for one.
const NEVER: Duration = Duration::from_secs(3600);

fn options(replicate: Replicate) -> Options {
    Options::default().maintenance(None).replicate(replicate)
}

/// A store on `disk` (a file system in memory, which a test can crash).
fn open_on(disk: &MemFs, replicate: Replicate) -> Store {
    Store::open("/store", options(replicate).fs(Arc::new(disk.clone()))).unwrap()
}

/// What a kill -9 of the store's process leaves on `disk`: every byte
/// written (the page cache survives a process's death). The store itself
/// is leaked, as a killed process's would be: nothing of its close runs.
/// Its thread goes on shipping what the killed store held (no more):
/// the next open's claim fences it.
fn kill(store: Store, disk: &MemFs) -> MemFs {
    let left = disk.crash(Crash::KeepUnsynced);
    std::mem::forget(store);
    left
}

fn write(store: &Store, from: usize, to: usize) {
    for i in from..to {
        store
            .append_message(
                "acme",
                &format!("case-{}", i % 3),
                format!("m{i}").as_bytes(),
            )
            .unwrap();
    }
}

/// How many records a restore of `to` holds.
fn restored_records(to: &Replicate) -> u64 {
    let out = tempfile::tempdir().unwrap();
    restore(to, out.path().join("r"), None).unwrap().records
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// How many records a restore holds once the store in `dir`, opened with
/// replication as `to` makes it, has shipped its log and closed.
fn reopened_and_restored(dir: &std::path::Path, to: impl Fn() -> Replicate) -> u64 {
    let store = Store::open(dir, options(to())).unwrap();
    store.ship_replica(WAIT).unwrap();
    store.close().unwrap();
    restored_records(&to())
}

/// `bucket`, with calls that wait as `how` sets (an hour: they hang).
fn hang(bucket: &Arc<InMemory>, how: impl FnOnce(&mut ThrottleConfig)) -> Arc<dyn ObjectStore> {
    let mut config = ThrottleConfig::default();
    how(&mut config);
    let inner: Arc<dyn ObjectStore> = bucket.clone();
    Arc::new(ThrottledStore::new(inner, config))
}

/// The paths of the objects under `prefix`.
fn listed(bucket: &dyn ObjectStore, prefix: &str) -> Vec<ObjectPath> {
    use futures::TryStreamExt;
    block_on(async {
        let all: Vec<_> = bucket
            .list(Some(&ObjectPath::from(prefix)))
            .try_collect()
            .await
            .unwrap();
        all.into_iter().map(|m| m.location).collect()
    })
}

/// Deletes every object under `prefix`.
fn wipe(bucket: &dyn ObjectStore, prefix: &str) {
    let all = listed(bucket, prefix);
    assert!(!all.is_empty());
    for path in all {
        block_on(bucket.delete(&path)).unwrap();
    }
}

#[test]
fn a_store_reopened_in_the_middle_of_a_segment_ships_across_what_it_found() {
    // A kill leaves the active segment part-full; the next open goes on
    // appending to it, and the new epoch ships it again from its start.
    // When writes land before that epoch's first view (under load, or
    // after a first round that failed, as here), the piece spans the bytes
    // the open found and those appended since.
    let bucket = Arc::new(InMemory::new());
    let to = || {
        Replicate::to_store(bucket.clone(), "r")
            .interval(Duration::from_millis(50))
            .lease(None)
    };
    let identity = ObjectPath::from("r/IDENTITY");
    let mut disk = MemFs::new();
    let mut store = open_on(&disk, to());
    write(&store, 0, 5);
    store.ship_replica(WAIT).unwrap();
    for round in 1..4 {
        disk = kill(store, &disk);
        // The first round of the restarted store fails.
        let ours = block_on(async { bucket.get(&identity).await.unwrap().bytes().await.unwrap() });
        block_on(bucket.put(&identity, vec![7u8; ours.len()].into())).unwrap();
        store = open_on(&disk, to());
        let err = store.ship_replica(WAIT).unwrap_err().to_string();
        assert!(err.contains("another store's replica"), "{err}");
        write(&store, round * 5, round * 5 + 5);
        block_on(bucket.put(&identity, ours.into())).unwrap();
        store.ship_replica(WAIT).unwrap();
        let status = store.replication().unwrap();
        assert_eq!(
            (status.lag_bytes, status.last_error.clone()),
            (0, None),
            "{status:?}"
        );
        assert_eq!(restored_records(&to()), (round * 5 + 5) as u64);
    }
}

#[test]
fn a_wiped_replica_stops_replication_with_a_clear_error() {
    let bucket = Arc::new(InMemory::new());
    let to = || {
        Replicate::to_store(bucket.clone(), "r")
            .interval(NEVER)
            .lease(Some(Duration::from_millis(200)))
    };
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(to())).unwrap();
    write(&store, 0, 10);
    store.ship_replica(WAIT).unwrap();
    wipe(bucket.as_ref(), "r");
    write(&store, 10, 11);
    let err = store.ship_replica(WAIT).unwrap_err().to_string();
    assert!(err.contains("is gone from"), "{err}");
    let status = store.replication().unwrap();
    assert!(status.stopped, "{status:?}");
    assert!(status.lag_bytes > 0, "{status:?}");
    // Nothing more is published into the emptied place.
    assert!(restore(&to(), dir.path().join("r"), None).is_err());
    // Stopped, under a lease: writes are refused at once, naming the cause.
    assert!(!status.acknowledging, "{status:?}");
    let err = store
        .append_message("acme", "case-1", b"late")
        .unwrap_err()
        .to_string();
    assert!(err.contains("is gone from"), "{err}");
    drop(store);
    // Reopened, the store replicates into the empty place from its start.
    // The refused write was stored all the same: 10, 1 and the late one.
    assert_eq!(reopened_and_restored(dir.path(), to), 12);
}

#[test]
fn the_lag_after_a_reopen_counts_from_what_the_replica_held() {
    // One replica, reached through a store the test can make hang.
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let throttled = Arc::new(ThrottledStore::new(inner, ThrottleConfig::default()));
    let to = || {
        Replicate::to_store(throttled.clone(), "r")
            .interval(NEVER)
            .round_timeout(Duration::from_millis(300))
            .lease(None)
    };
    let disk = MemFs::new();
    let store = open_on(&disk, to());
    write(&store, 0, 5);
    store.ship_replica(WAIT).unwrap();
    let published = store.replication().unwrap().restore_point_ms;
    // Writes the replica never gets: the store is killed before a round,
    // 300 ms after its last point.
    std::thread::sleep(Duration::from_millis(300));
    write(&store, 5, 10);
    let mut disk = kill(store, &disk);
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    // Reopened while the object store hangs: (1) on its uploads, so the
    // round reads the newest point and fails after; (2) on everything, so
    // no round reads anything and the store's own hint of the last round
    // it saw is all there is. Either way the lag counts from what the
    // replica holds, not from the reopen.
    for hangs in [
        (|c: &mut ThrottleConfig| c.wait_put_per_call = Duration::from_secs(3600)) as fn(&mut _),
        |c: &mut ThrottleConfig| c.wait_list_per_call = Duration::from_secs(3600),
    ] {
        throttled.config_mut(hangs);
        let store = open_on(&disk, to());
        let err = store.ship_replica(WAIT).unwrap_err().to_string();
        assert!(err.contains("hangs rather than answers"), "{err}");
        let status = store.replication().unwrap();
        assert!(status.lag_bytes > 0, "{status:?}");
        assert!(status.failures >= 1, "{status:?}");
        assert!(status.lag_ms >= now() - published - 50, "{status:?}");
        assert!(status.lag_ms >= 300, "{status:?}");
        disk = kill(store, &disk);
    }
}

/// A store on a memory disk replicating to an object store whose every
/// upload hangs (a round fails after 300 ms), with no round of its own
/// until asked (an hour's interval) and no lease; the throttle, to let the
/// uploads answer again.
fn hanging_uploads() -> (Arc<ThrottledStore<Arc<dyn ObjectStore>>>, MemFs, Store) {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let throttled = Arc::new(ThrottledStore::new(inner, ThrottleConfig::default()));
    throttled.config_mut(|c| c.wait_put_per_call = NEVER);
    let replicate = Replicate::to_store(throttled.clone(), "r")
        .interval(NEVER)
        .round_timeout(Duration::from_millis(300))
        .lease(None);
    let disk = MemFs::new();
    let store = open_on(&disk, replicate);
    (throttled, disk, store)
}

#[test]
fn ship_now_runs_a_round_at_once_while_the_thread_backs_off_after_a_failure() {
    // Every upload hangs: each round fails after its 300 ms, and after a
    // failure the thread waits 30 s (the longest backoff, the interval
    // being an hour) before its next round of its own.
    let (throttled, _disk, store) = hanging_uploads();
    write(&store, 0, 3);
    // Twice: the first call may find the open's round under way, the
    // second finds the thread backing off after one or two failures.
    // Each asks for a round that starts after it, and gets that round's
    // own failure, not a wait for the backoff to end.
    let wait = Duration::from_secs(10);
    for _ in 0..2 {
        let err = store.ship_replica(wait).unwrap_err().to_string();
        assert!(err.contains("hangs rather than answers"), "{err}");
    }
    let status = store.replication().unwrap();
    assert!(status.failures >= 2, "{status:?}");
    // Once the object store answers, a call ships at once too.
    throttled.config_mut(|c| c.wait_put_per_call = Duration::ZERO);
    let status = store.ship_replica(wait).unwrap();
    assert_eq!(status.lag_bytes, 0, "{status:?}");
    assert!(status.last_error.is_none(), "{status:?}");
}

#[test]
fn many_callers_of_ship_now_at_once_each_get_a_round_that_began_after_them() {
    // Eight threads ship at once, twice, while every upload hangs (each
    // round fails after its 300 ms), then once more after the object
    // store answers: every call ends with a round's own answer, none
    // waits out a backoff, and the last calls all ship.
    let (throttled, _disk, store) = hanging_uploads();
    let wait = Duration::from_secs(10);
    let all_ship = |store: &Store, from: usize| -> Vec<Result<(), String>> {
        std::thread::scope(|s| {
            let calls: Vec<_> = (0..8)
                .map(|t| {
                    s.spawn(move || {
                        write(store, from + t, from + t + 1);
                        store
                            .ship_replica(wait)
                            .map(|_| ())
                            .map_err(|e| e.to_string())
                    })
                })
                .collect();
            calls.into_iter().map(|c| c.join().unwrap()).collect()
        })
    };
    for round in 0..2 {
        for answer in all_ship(&store, round * 8) {
            let err = answer.unwrap_err();
            assert!(err.contains("hangs rather than answers"), "{err}");
        }
    }
    throttled.config_mut(|c| c.wait_put_per_call = Duration::ZERO);
    for answer in all_ship(&store, 16) {
        // Each call's round began after its write and succeeded (others'
        // writes may lag it: they run at once).
        answer.unwrap();
    }
    // All 24 writes are in the replica (each call's round covered it).
    let to = Replicate::to_store(throttled.clone(), "r");
    assert_eq!(restored_records(&to), 24);
    drop(store);
}

#[test]
fn a_writer_whose_lease_lapsed_refuses_writes_until_a_round_renews_it() {
    // The object store hangs after the first round: rounds fail by their
    // timeout, the lease lapses, and writes are refused (stored here).
    let bucket = Arc::new(InMemory::new());
    let dir = tempfile::tempdir().unwrap();
    let lease = Duration::from_millis(300);
    let to = || {
        Replicate::to_store(bucket.clone(), "r")
            .interval(Duration::from_millis(20))
            .lease(Some(lease))
    };
    let store = Store::open(dir.path(), options(to())).unwrap();
    // Written under a sound lease: acknowledged.
    write(&store, 0, 10);
    store.close().unwrap();
    let hanging = hang(&bucket, |c| {
        c.wait_list_per_call = Duration::from_secs(3600)
    });
    let stuck = Replicate::to_store(hanging, "r")
        .interval(Duration::from_millis(20))
        .round_timeout(Duration::from_millis(100))
        .lease(Some(lease));
    let store = Store::open(dir.path(), options(stuck)).unwrap();
    let err = store
        .append_message("acme", "case-1", b"unconfirmed")
        .unwrap_err()
        .to_string();
    assert!(err.contains("lease"), "{err}");
    assert!(err.contains("hangs rather than answers"), "{err}");
    drop(store);
    // With no lease, the same store acknowledges (and the lag grows).
    let hanging = hang(&bucket, |c| {
        c.wait_list_per_call = Duration::from_secs(3600)
    });
    let unleased = Replicate::to_store(hanging, "r")
        .round_timeout(Duration::from_millis(100))
        .lease(None);
    let store = Store::open(dir.path(), options(unleased)).unwrap();
    store.append_message("acme", "case-1", b"acked").unwrap();
    drop(store);
    // Back to a sound object store: the writes refused before were stored
    // all the same, and reach the replica.
    assert_eq!(reopened_and_restored(dir.path(), to), 12);
}

#[test]
fn every_point_is_checked_and_a_damaged_one_is_named() {
    let bucket = Arc::new(InMemory::new());
    let to = || Replicate::to_store(bucket.clone(), "r").interval(NEVER);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(to())).unwrap();
    for round in 0..6 {
        write(&store, round * 4, round * 4 + 4);
        store.ship_replica(WAIT).unwrap();
    }
    store.close().unwrap();
    let points = restore_points(&to()).unwrap();
    assert!(points.len() >= 6, "{points:?}");
    assert_eq!(check_points(&to()).unwrap(), points.len());
    // One byte of the first piece flipped: every point names it.
    let piece = listed(bucket.as_ref(), "r/pieces")
        .into_iter()
        .find(|l| l.filename() == Some("0000000000000000"))
        .unwrap();
    let mut bytes =
        block_on(async { bucket.get(&piece).await.unwrap().bytes().await.unwrap() }).to_vec();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    block_on(bucket.put(&piece, bytes.into())).unwrap();
    let err = check_points(&to()).unwrap_err().to_string();
    assert!(err.contains("restore point 1 names segment"), "{err}");
    assert!(err.contains("cannot be restored"), "{err}");
}

#[test]
fn a_follower_never_writes_a_damaged_piece_and_goes_on_once_it_is_whole() {
    let bucket = Arc::new(InMemory::new());
    let to = || Replicate::to_store(bucket.clone(), "r").interval(NEVER);
    let (dir, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let store = Store::open(dir.path(), options(to())).unwrap();
    write(&store, 0, 5);
    store.ship_replica(WAIT).unwrap();
    let copy = out.path().join("copy");
    let mut follower = ctxlog::replicate::Follower::start(&to(), &copy).unwrap();
    // The next piece arrives damaged (one byte flipped in the object).
    write(&store, 5, 10);
    store.ship_replica(WAIT).unwrap();
    let newest = listed(bucket.as_ref(), "r/pieces")
        .into_iter()
        .max_by_key(|l| l.filename().map(str::to_string))
        .unwrap();
    let good = block_on(async { bucket.get(&newest).await.unwrap().bytes().await.unwrap() });
    let mut bad = good.to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    let seg = |dir: &std::path::Path| -> Vec<(String, u64)> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".seg"))
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    e.metadata().unwrap().len(),
                )
            })
            .collect();
        files.sort();
        files
    };
    let before = seg(&copy);
    block_on(bucket.put(&newest, bad.into())).unwrap();
    let err = follower.catch_up().unwrap_err().to_string();
    assert!(err.contains("do not match"), "{err}");
    // Nothing of it was written: the copy is as it was, and opens.
    assert_eq!(seg(&copy), before);
    Store::open_read_only(&copy, Options::default()).unwrap();
    // Whole again: following goes on.
    block_on(bucket.put(&newest, good.into())).unwrap();
    assert!(follower.catch_up().unwrap());
    let copy_store = Store::open_read_only(&copy, Options::default()).unwrap();
    let n: usize = (0..3)
        .map(|i| {
            copy_store
                .export_context("acme", &format!("case-{i}"))
                .unwrap()
                .len()
        })
        .sum();
    assert_eq!(n, 10);
}
