//! Replication to object storage and restores from it: a restored store
//! holds, byte for byte, the log its restore point names; damaged or
//! missing objects are refused; another store's replica is never written
//! over.
#![cfg(feature = "replicate")]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ctxlog::replicate::object_store::memory::InMemory;
use ctxlog::replicate::{restore, restore_points};
use ctxlog::{Error, Options, Replicate, Store};

const WAIT: Duration = Duration::from_secs(20);

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

/// The store's segment files and manifest, by name.
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

#[test]
fn a_closed_store_restores_byte_for_byte_from_a_directory() {
    let (dir, bucket, out) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let to = || Replicate::to(bucket.path().to_str().unwrap()).interval(Duration::from_millis(5));
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

#[test]
fn a_running_store_ships_its_synced_bytes_and_a_restore_point_in_time_holds_only_what_came_before()
{
    let bucket: Arc<InMemory> = Arc::new(InMemory::new());
    let to =
        || Replicate::to_store(bucket.clone(), "stores/one").interval(Duration::from_secs(3600));
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
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
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
    let items = contents(&earlier);
    assert_eq!(items.len(), 100);
    let points = restore_points(&to()).unwrap();
    assert_eq!(points.last().unwrap().number, second.restore_point);
    // Before the first point there is nothing to restore.
    let err = restore(&to(), out.path().join("none"), Some(points[0].time_ms - 1)).unwrap_err();
    assert!(err.to_string().contains("oldest restore point"), "{err}");
    store.close().unwrap();
}

#[test]
fn damaged_cut_or_missing_objects_are_refused_and_leave_nothing_behind() {
    let (dir, bucket, out) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let url = bucket.path().to_str().unwrap().to_string();
    let store = Store::open(dir.path(), options(Replicate::to(&url))).unwrap();
    write(&store, 0, 300);
    store.close().unwrap();
    let segments = bucket.path().join("segments");
    let mut names: Vec<_> = std::fs::read_dir(&segments)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let victim = names[1].clone();
    let good = std::fs::read(&victim).unwrap();

    let attempt = |name: &str| {
        let target = out.path().join(name);
        let err = restore(&Replicate::to(&url), &target, None).unwrap_err();
        assert!(matches!(err, Error::Replica { .. }), "{err}");
        assert!(!target.exists(), "a failed restore leaves no store");
        let leftovers: Vec<_> = std::fs::read_dir(out.path()).unwrap().collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        err.to_string()
    };
    let mut flipped = good.clone();
    flipped[200] ^= 1;
    std::fs::write(&victim, &flipped).unwrap();
    assert!(attempt("flipped").contains("checksum"));
    std::fs::write(&victim, &good[..good.len() - 10]).unwrap();
    assert!(attempt("cut").contains("lacks bytes"));
    std::fs::remove_file(&victim).unwrap();
    assert!(attempt("missing").contains("lacks bytes"));
    std::fs::write(&victim, &good).unwrap();
    restore(&Replicate::to(&url), out.path().join("whole"), None).unwrap();
}

#[test]
fn a_second_store_never_writes_over_another_stores_replica() {
    let bucket: Arc<InMemory> = Arc::new(InMemory::new());
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = Store::open(
        one.path(),
        options(Replicate::to_store(bucket.clone(), "p")),
    )
    .unwrap();
    write(&first, 0, 10);
    first.close().unwrap();
    let second = Store::open(
        two.path(),
        options(Replicate::to_store(bucket.clone(), "p")),
    )
    .unwrap();
    write(&second, 0, 20);
    let err = second.ship_replica(WAIT).unwrap_err();
    assert!(err.to_string().contains("another store's replica"), "{err}");
    assert!(second.replication().unwrap().last_error.is_some());
    second.close().unwrap();
    let out = tempfile::tempdir().unwrap();
    let restored = out.path().join("r");
    restore(&Replicate::to_store(bucket.clone(), "p"), &restored, None).unwrap();
    assert_eq!(contents(&restored).len(), 10);
}

#[test]
fn a_reopened_store_goes_on_from_its_replicas_last_point() {
    let bucket: Arc<InMemory> = Arc::new(InMemory::new());
    let to = || Replicate::to_store(bucket.clone(), "").interval(Duration::from_secs(3600));
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

#[test]
fn past_the_retention_window_only_the_newest_point_and_what_it_names_are_kept() {
    let (dir, bucket, out) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let url = bucket.path().to_str().unwrap().to_string();
    let to = || {
        Replicate::to(&url)
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
    let listed = |sub: &str| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(bucket.path().join(sub))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    };
    store.close().unwrap();
    // Every segment left in the bucket is one of the log's now.
    let live: Vec<String> = log_files(dir.path())
        .into_iter()
        .map(|(name, _)| name)
        .filter(|n| n.ends_with(".seg"))
        .collect();
    for name in listed("segments") {
        assert!(live.contains(&name), "{name} is not in {live:?}");
    }
    assert!(listed("retired").is_empty(), "{:?}", listed("retired"));
    let restored = out.path().join("r");
    restore(&to(), &restored, None).unwrap();
    assert_eq!(contents(&restored).len(), 330);
}

#[cfg(feature = "cli")]
#[test]
fn the_command_line_lists_restore_points_and_restores() {
    let (dir, bucket, out) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let url = format!("file://{}", bucket.path().display());
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
    assert!(listed.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8(listed.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.last().unwrap()["restorePoint"], 1);
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
