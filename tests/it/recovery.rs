//! Opening after a crash or damage: torn tails are cut, nothing acknowledged
//! is lost, damage elsewhere is refused with its segment and offset.

use crate::common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use common::{body, crash_copy, segment_files, tmp};
use ctxlog::internals::frame::{
    encode_frame, encode_header, StoreId, FRAME_HEADER_LEN, HEADER_LEN,
};
use ctxlog::{Error, Options, RecoveryMode, Store};

/// One acknowledged append and how long its segment was right after it.
#[derive(Clone)]
struct Acked {
    context: String,
    raw: Vec<u8>,
    segment: usize,
    end: u64,
}

/// Writes `n` messages round-robin over three contexts, recording for each
/// the segment it went to and that segment's length once the call returned.
fn write_acked(dir: &Path, options: Options, n: usize) -> Vec<Acked> {
    // Without preallocation, so that a file's length is where its last
    // record ends (`lay_out` adds zero-filled space back).
    let store = Store::open(dir, options.preallocate(0)).unwrap();
    let mut acked = Vec::new();
    for i in 0..n {
        let context = format!("ctx-{}", i % 3);
        let raw = body(i, 20 + (i * 37) % 90);
        store.append_message("t", &context, &raw).unwrap();
        let files = segment_files(dir);
        let last = files.last().unwrap();
        acked.push(Acked {
            context,
            raw,
            segment: files.len() - 1,
            end: fs::metadata(last).unwrap().len(),
        });
    }
    store.close().unwrap();
    // These tests exercise the open's scan of the log: without the index
    // checkpoint the close wrote, the next open reads everything.
    fs::remove_file(dir.join("CHECKPOINT")).unwrap();
    acked
}

/// What the store serves, per context.
fn contents(store: &Store) -> BTreeMap<String, Vec<Vec<u8>>> {
    let page = store.list_contexts("t", 100, None).unwrap();
    page.contexts
        .into_iter()
        .map(|c| {
            let msgs = store.last_messages("t", &c.context_id, usize::MAX).unwrap();
            (c.context_id, msgs.into_iter().map(|m| m.raw).collect())
        })
        .collect()
}

fn expected(acked: &[Acked]) -> BTreeMap<String, Vec<Vec<u8>>> {
    let mut m: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for a in acked {
        m.entry(a.context.clone()).or_default().push(a.raw.clone());
    }
    m
}

/// Rebuilds a store directory from the files' bytes, the newest cut at `cut`
/// and followed by `zeros` zero bytes (the writer's preallocated space).
fn lay_out(dir: &Path, files: &[(String, Vec<u8>)], cut: usize, zeros: usize) {
    let (newest, sealed) = files.split_last().unwrap();
    for (name, bytes) in sealed {
        fs::write(dir.join(name), bytes).unwrap();
    }
    let mut bytes = newest.1[..cut].to_vec();
    bytes.resize(cut + zeros, 0);
    fs::write(dir.join(&newest.0), bytes).unwrap();
}

/// Appends a valid frame holding `payload` to segment 1, the newest.
fn append_frame(dir: &Path, payload: &[u8]) {
    let seg = segment_files(dir).pop().unwrap();
    let mut bytes = fs::read(&seg).unwrap();
    let offset = bytes.len() as u64;
    encode_frame(1, offset, HEADER_LEN as u32, payload, &mut bytes);
    fs::write(&seg, bytes).unwrap();
}

/// A closed store holding one raw message, `raw`, in context ("t", "c").
fn closed_store_with(raw: &[u8]) -> tempfile::TempDir {
    let dir = tmp();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    store.append_message("t", "c", raw).unwrap();
    store.close().unwrap();
    dir
}

fn read_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    segment_files(dir)
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_str().unwrap().to_string();
            (name, fs::read(&p).unwrap())
        })
        .collect()
}

fn cut_everywhere(options: Options, n: usize) {
    let src = tmp();
    let acked = write_acked(src.path(), options.clone(), n);
    let files = read_files(src.path());
    let newest = files.len() - 1;
    let full = files[newest].1.len();
    for cut in 0..=full {
        let dir = tmp();
        // Every other cut past the header (synced before any record, so
        // before any preallocation), the file goes on in zeros, as a crash
        // leaves it while appends overwrite preallocated space.
        let zeros = if cut % 2 == 1 && cut as u64 >= HEADER_LEN {
            700
        } else {
            0
        };
        lay_out(dir.path(), &files, cut, zeros);
        // The crash happened when the newest segment was `cut` bytes long:
        // exactly the appends that had returned by then must come back.
        let survived: Vec<Acked> = acked
            .iter()
            .filter(|a| a.segment < newest || a.end <= cut as u64)
            .cloned()
            .collect();
        let store = Store::open(dir.path(), options.clone())
            .unwrap_or_else(|e| panic!("open after cut at {cut}: {e}"));
        assert_eq!(contents(&store), expected(&survived), "cut at {cut}");
        let report = store.open_report().clone();
        let valid_end = survived
            .iter()
            .filter(|a| a.segment == newest)
            .map(|a| a.end)
            .max()
            .unwrap_or(HEADER_LEN);
        let dropped = &files[newest].1[valid_end as usize..cut.max(valid_end as usize)];
        if dropped.iter().any(|&b| b != 0) {
            let torn = report.torn_tail.expect("a torn tail is reported");
            assert_eq!(torn.offset, valid_end, "cut at {cut}");
            assert_eq!(torn.bytes, (cut + zeros) as u64 - valid_end, "cut at {cut}");
            assert!(torn.records >= 1);
        } else {
            assert_eq!(report.torn_tail, None, "cut at {cut}");
        }
        assert_eq!(report.records as usize, survived.len());
        // Every few cuts, check the store keeps working after recovery.
        if cut % 97 == 0 {
            store.append_message("t", "after", b"later").unwrap();
            drop(store);
            let store = Store::open(dir.path(), options.clone()).unwrap();
            let mut want = expected(&survived);
            want.insert("after".into(), vec![b"later".to_vec()]);
            assert_eq!(contents(&store), want, "append after cut at {cut}");
        }
    }
}

#[test]
fn a_cut_at_every_byte_recovers_exactly_the_acknowledged_appends() {
    cut_everywhere(Options::default(), 24);
}

#[test]
fn a_cut_at_every_byte_of_the_newest_segment_after_rotations() {
    cut_everywhere(Options::default().segment_bytes(4096), 110);
}

fn flip(path: &Path, at: usize) {
    let mut bytes = fs::read(path).unwrap();
    bytes[at] ^= 0x10;
    fs::write(path, bytes).unwrap();
}

/// Offsets of the frames of a segment, found by walking the length fields.
fn frame_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut at = HEADER_LEN as usize;
    let mut out = Vec::new();
    while at < bytes.len() {
        out.push(at);
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        at += FRAME_HEADER_LEN as usize + len;
    }
    out
}

#[test]
fn a_flipped_bit_in_a_sealed_segment_is_reported_with_its_offset() {
    let dir = tmp();
    let options = Options::default().segment_bytes(4096);
    let acked = write_acked(dir.path(), options.clone(), 120);
    let files = segment_files(dir.path());
    assert!(files.len() >= 3, "the test needs sealed segments");
    let victim = &files[1];
    let offsets = frame_offsets(&fs::read(victim).unwrap());
    let frame = offsets[offsets.len() / 2];
    flip(victim, frame + 20);
    match Store::open(dir.path(), options.clone()) {
        Err(Error::Corrupt {
            segment, offset, ..
        }) => {
            assert_eq!(segment, 2);
            assert_eq!(offset, frame as u64);
        }
        Err(e) => panic!("expected Corrupt, got {e}"),
        Ok(_) => panic!("a damaged sealed segment opened in strict mode"),
    }
    // Skipping serves everything else and says what it skipped.
    let store = Store::open(dir.path(), options.recovery(RecoveryMode::SkipCorrupt)).unwrap();
    let report = store.open_report();
    assert_eq!(report.skipped.len(), 1, "{report:?}");
    assert_eq!(report.skipped[0].segment, 2);
    assert_eq!(report.skipped[0].offset, frame as u64);
    // Only the damaged record is missing: the rest of its context, after the
    // gap, is still served.
    assert_eq!(report.records as usize, acked.len() - 1);
    let served: usize = contents(&store).values().map(Vec::len).sum();
    assert_eq!(served, acked.len() - 1);
}

#[test]
fn a_flipped_bit_mid_newest_segment_is_corruption_not_a_torn_tail() {
    let dir = tmp();
    write_acked(dir.path(), Options::default(), 12);
    let files = segment_files(dir.path());
    let newest = files.last().unwrap();
    let offsets = frame_offsets(&fs::read(newest).unwrap());
    let len = fs::metadata(newest).unwrap().len();
    flip(newest, offsets[3] + 12);
    match Store::open(dir.path(), Options::default()) {
        Err(Error::Corrupt {
            segment, offset, ..
        }) => {
            assert_eq!((segment, offset), (1, offsets[3] as u64));
        }
        Err(e) => panic!("expected Corrupt, got {e}"),
        Ok(_) => panic!("damage before valid records was truncated away"),
    }
    // Nothing was truncated by the refused open.
    assert_eq!(fs::metadata(newest).unwrap().len(), len);
}

/// Unsynced appends can reach the disk out of order: a hole followed by valid
/// frames that no watermark vouches for is a torn tail, not corruption.
#[test]
fn a_hole_in_unsynced_bytes_is_a_torn_tail() {
    let dir = tmp();
    let options = Options::default().durability(ctxlog::Durability::Buffered);
    write_acked(dir.path(), options.clone(), 12);
    let newest = segment_files(dir.path()).pop().unwrap();
    let mut bytes = fs::read(&newest).unwrap();
    let offsets = frame_offsets(&bytes);
    // The page holding frame 5 never reached the disk.
    for b in &mut bytes[offsets[5]..offsets[6]] {
        *b = 0;
    }
    fs::write(&newest, &bytes).unwrap();
    let store = Store::open(dir.path(), options).unwrap();
    let torn = store.open_report().torn_tail.clone().unwrap();
    assert_eq!(torn.offset, offsets[5] as u64);
    assert_eq!(torn.bytes, (bytes.len() - offsets[5]) as u64);
    assert_eq!(store.open_report().records, 5);
    assert_eq!(fs::metadata(&newest).unwrap().len(), offsets[5] as u64);
}

#[test]
fn a_second_opener_gets_locked() {
    let dir = tmp();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    match Store::open(dir.path(), Options::default()) {
        Err(Error::Locked { path }) => assert!(path.ends_with("LOCK")),
        Err(e) => panic!("expected Locked, got {e}"),
        Ok(_) => panic!("two stores opened one directory"),
    }
    drop(store);
    Store::open(dir.path(), Options::default()).unwrap();
}

#[test]
fn another_format_version_is_refused_clearly() {
    let dir = tmp();
    let mut header = encode_header(1, 0, StoreId([1; 16]), None);
    header[8..12].copy_from_slice(&3u32.to_le_bytes());
    fs::write(dir.path().join("0000000000000001.seg"), header).unwrap();
    match Store::open(dir.path(), Options::default()) {
        Err(
            e @ Error::UnsupportedFormat {
                found: 3,
                supported: 2,
                ..
            },
        ) => {
            assert!(e.to_string().contains("format version 3"), "{e}");
        }
        Err(e) => panic!("expected UnsupportedFormat, got {e}"),
        Ok(_) => panic!("a newer format opened"),
    }
}

#[test]
fn records_of_an_unknown_namespace_version_are_never_served() {
    let dir = closed_store_with(b"current");
    // Append a valid frame whose payload claims namespace version 2 and the
    // key the current version gives ("t", "c").
    let key = ctxlog::ContextKey::derive("t", "c").unwrap();
    let mut payload = vec![2u8];
    payload.extend_from_slice(key.digest());
    payload.extend_from_slice(b"\x04\0\0\0junkjunk");
    append_frame(dir.path(), &payload);

    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert_eq!(store.open_report().foreign_namespace_records, 1);
    assert_eq!(store.open_report().torn_tail, None);
    let msgs = store.last_messages("t", "c", usize::MAX).unwrap();
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].raw, b"current");
    assert_eq!(
        store.list_contexts("t", 10, None).unwrap().contexts.len(),
        1
    );
}

#[test]
fn a_rotation_torn_before_its_header_was_durable_is_removed() {
    let dir = tmp();
    let acked = write_acked(dir.path(), Options::default(), 5);
    fs::write(
        dir.path().join("0000000000000002.seg"),
        &encode_header(2, 0, StoreId([1; 16]), None)[..17],
    )
    .unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert_eq!(store.open_report().removed_segments, vec![2]);
    assert_eq!(contents(&store), expected(&acked));
    store.append_message("t", "ctx-0", b"next").unwrap();
    drop(store);
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert_eq!(
        store.last_messages("t", "ctx-0", 1).unwrap()[0].raw,
        b"next"
    );
}

#[test]
fn a_clean_reopen_loads_the_checkpoint_and_reads_only_what_follows() {
    let dir = tmp();
    let options = Options::default().segment_bytes(4096);
    let store = Store::open(dir.path(), options.clone()).unwrap();
    for i in 0..50 {
        store
            .append_message("t", &format!("c{}", i % 3), &body(i, 60))
            .unwrap();
    }
    store.close().unwrap();
    let store = Store::open(dir.path(), options.clone()).unwrap();
    assert!(store.open_report().from_checkpoint);
    assert_eq!(store.open_report().records, 50);
    assert_eq!(store.open_report().replayed, 0);
    for i in 50..70 {
        store
            .append_message("t", &format!("c{}", i % 3), &body(i, 60))
            .unwrap();
    }
    // A crash now: the directory as it is, with the checkpoint of the last close.
    let crashed = crash_copy(dir.path());
    let reopened = Store::open(crashed.path(), options.clone()).unwrap();
    assert!(reopened.open_report().from_checkpoint);
    assert_eq!(reopened.open_report().records, 70);
    for c in 0..3 {
        let want: Vec<Vec<u8>> = (0..70)
            .filter(|i| i % 3 == c)
            .map(|i| body(i, 60))
            .collect();
        let got: Vec<Vec<u8>> = reopened
            .last_messages("t", &format!("c{c}"), usize::MAX)
            .unwrap()
            .into_iter()
            .map(|m| m.raw)
            .collect();
        assert_eq!(got, want);
    }
}

#[test]
fn a_damaged_or_mismatched_checkpoint_falls_back_to_a_scan() {
    let dir = tmp();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    for i in 0..20 {
        store.append_message("t", "c", &body(i, 40)).unwrap();
    }
    store.close().unwrap();
    let path = dir.path().join("CHECKPOINT");
    let good = fs::read(&path).unwrap();
    let mut bad = good.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x55;
    fs::write(&path, &bad).unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let report = store.open_report().clone();
    assert!(!report.from_checkpoint);
    assert!(report.checkpoint_ignored.is_some(), "{report:?}");
    assert_eq!(store.last_messages("t", "c", usize::MAX).unwrap().len(), 20);
    drop(store);

    // A checkpoint that claims more log than there is (the segment was cut):
    // acknowledged records are missing, which only SkipCorrupt accepts.
    fs::write(&path, &good).unwrap();
    let seg = segment_files(dir.path()).pop().unwrap();
    let len = fs::metadata(&seg).unwrap().len();
    let frames = frame_offsets(&fs::read(&seg).unwrap());
    fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(frames[10] as u64)
        .unwrap();
    assert!(len > frames[10] as u64);
    match Store::open(dir.path(), Options::default()) {
        Err(Error::MissingRecords {
            expected, actual, ..
        }) => assert_eq!((expected, actual), (len, frames[10] as u64)),
        other => panic!("expected MissingRecords, got {:?}", other.err()),
    }
    let skip = Options::default().recovery(RecoveryMode::SkipCorrupt);
    let store = Store::open(dir.path(), skip).unwrap();
    assert!(!store.open_report().from_checkpoint);
    assert!(store.open_report().checkpoint_ignored.is_some());
    assert_eq!(store.open_report().lost.len(), 1);
    assert_eq!(store.last_messages("t", "c", usize::MAX).unwrap().len(), 10);
}

#[test]
fn checkpoints_taken_while_appends_are_in_flight_lose_nothing() {
    let dir = tmp();
    let options = Options::default()
        .durability(ctxlog::Durability::GroupCommit)
        .segment_bytes(16 * 1024)
        .checkpoint_interval(Some(4096));
    let store = std::sync::Arc::new(Store::open(dir.path(), options.clone()).unwrap());
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..120 {
                    store
                        .append_message("t", &format!("c{}", (t + i) % 5), &body(t * 1000 + i, 50))
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(
        dir.path().join("CHECKPOINT").exists(),
        "no checkpoint was written while running"
    );
    // A crash right after the last acknowledgement: the periodic checkpoint
    // plus the log after it must give back every append exactly once.
    let crashed = crash_copy(dir.path());
    let reopened = Store::open(crashed.path(), options).unwrap();
    assert!(reopened.open_report().from_checkpoint);
    let mut total = 0;
    for c in 0..5 {
        let msgs = reopened
            .last_messages("t", &format!("c{c}"), usize::MAX)
            .unwrap();
        for (i, m) in msgs.iter().enumerate() {
            assert_eq!(m.seq, i as u64);
        }
        let live = store
            .last_messages("t", &format!("c{c}"), usize::MAX)
            .unwrap();
        assert_eq!(msgs, live, "c{c}");
        total += msgs.len();
    }
    assert_eq!(total, 8 * 120);
}

#[test]
fn a_read_only_session_leaves_the_checkpoint_as_it_was() {
    let dir = closed_store_with(b"one");
    let path = dir.path().join("CHECKPOINT");
    let before = fs::metadata(&path).unwrap().modified().unwrap();
    let bytes = fs::read(&path).unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert_eq!(store.last_messages("t", "c", 1).unwrap().len(), 1);
    store.close().unwrap();
    assert_eq!(fs::read(&path).unwrap(), bytes);
    assert_eq!(
        fs::metadata(&path).unwrap().modified().unwrap(),
        before,
        "rewritten by a read-only session"
    );
}

#[test]
fn a_record_seq_past_the_limit_is_damage_not_a_wrapped_seq() {
    use ctxlog::internals::record::{encode, RecordBody, RecordKind};
    let dir = closed_store_with(b"first");
    fs::remove_file(dir.path().join("CHECKPOINT")).unwrap();
    // A valid frame whose record claims seq 2^32 in context "c": a gap,
    // which SkipCorrupt accepts, but past what a context can hold.
    let key = ctxlog::ContextKey::derive("t", "c").unwrap();
    let body = RecordBody {
        seq: 1 << 32,
        timestamp_ms: 1,
        opens: None,
        kind: RecordKind::Message { task: None },
    };
    append_frame(dir.path(), &encode(&key, &body, b"far").unwrap());

    let err = Store::open(dir.path(), Options::default()).err().unwrap();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    let options = Options::default().recovery(RecoveryMode::SkipCorrupt);
    let store = Store::open(dir.path(), options).unwrap();
    let skipped = &store.open_report().skipped;
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(skipped[0].reason.contains("past"), "{}", skipped[0].reason);
    let a = store.append_message("t", "c", b"second").unwrap();
    assert_eq!(a.seq, 1);
    let raws: Vec<_> = store
        .last_messages("t", "c", 10)
        .unwrap()
        .into_iter()
        .map(|m| m.raw)
        .collect();
    assert_eq!(raws, vec![b"first".to_vec(), b"second".to_vec()]);
}

#[test]
fn a_segment_named_past_the_largest_id_is_refused() {
    let dir = closed_store_with(b"first");
    let seg = segment_files(dir.path()).pop().unwrap();
    fs::copy(&seg, dir.path().join("0000000100000000.seg")).unwrap();
    match Store::open(dir.path(), Options::default()) {
        Err(Error::Corrupt { segment, .. }) => assert_eq!(segment, 1 << 32),
        Err(e) => panic!("expected Corrupt, got {e}"),
        Ok(_) => panic!("opened a store with segment id 2^32"),
    }
    let report = Store::verify(dir.path(), &mut |_, _| {}).unwrap();
    assert!(
        report.damage.iter().any(|d| d.segment == 1 << 32),
        "{report:?}"
    );
}

#[test]
fn tasks_whose_ids_the_store_did_not_make_here_are_found_after_every_kind_of_open() {
    use ctxlog::internals::record::{encode, RecordBody, RecordKind, TaskLink};
    let dir = tmp();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    let msg = |id: &str| {
        format!(
            r#"{{"messageId":"{id}","role":"ROLE_USER","contextId":"c","parts":[{{"text":"{id}"}}]}}"#
        )
    };
    let made = store.receive_message("t", msg("m0").as_bytes()).unwrap();
    store.close().unwrap();
    // Tasks opened by records an earlier version or another tool wrote:
    // one id of 32 hex digits that does not begin with the context's
    // prefix, and one that is not hex at all.
    let key = ctxlog::ContextKey::derive("t", "c").unwrap();
    let foreign = ["00112233445566778899aabbccddeeff", "legacy-task"];
    for (seq, task_id) in (1..).zip(foreign) {
        let body = RecordBody {
            seq,
            timestamp_ms: 10 + seq,
            opens: None,
            kind: RecordKind::Message {
                task: Some(TaskLink {
                    task_id: task_id.to_string(),
                    opens_task: true,
                    message_id: format!("m{seq}"),
                    digest: [0; 32],
                }),
            },
        };
        let blob = msg(&format!("m{seq}"));
        append_frame(dir.path(), &encode(&key, &body, blob.as_bytes()).unwrap());
    }
    let check = |store: &Store, how: &str| {
        for id in foreign.iter().copied().chain([made.task_id.as_str()]) {
            let task = store.get_task("t", id, None, false);
            assert_eq!(task.map(|t| t.id).ok().as_deref(), Some(id), "{id}, {how}");
            assert!(
                matches!(
                    store.get_task("u", id, None, false),
                    Err(Error::TaskNotFound)
                ),
                "another tenant reached {id}, {how}"
            );
        }
    };
    // The checkpoint of the close, then the two records replayed.
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert!(store.open_report().from_checkpoint);
    check(&store, "replayed after a checkpoint");
    let cancel = store.cancel_task("t", foreign[0]).unwrap();
    assert_eq!(cancel.status.state, ctxlog::a2a::TaskState::Canceled);
    let next = store.receive_message("t", msg("m9").as_bytes()).unwrap();
    assert_eq!(
        next.task_id[..16],
        made.task_id[..16],
        "the store's task ids in one context share their first half"
    );
    store.close().unwrap();
    // From the checkpoint alone, then from a scan of the whole log.
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert!(store.open_report().replayed == 0 && store.open_report().from_checkpoint);
    check(&store, "from the checkpoint");
    store.close().unwrap();
    fs::remove_file(dir.path().join("CHECKPOINT")).unwrap();
    let store = Store::open(dir.path(), Options::default()).unwrap();
    check(&store, "from a scan");
    let canceled = store.get_task("t", foreign[0], None, false).unwrap();
    assert_eq!(canceled.status.state, ctxlog::a2a::TaskState::Canceled);
    assert_eq!(
        store.get_task("t", &next.task_id, None, false).unwrap().id,
        next.task_id
    );
}

/// What broke: a store closed with a checkpoint, then damaged, opened under
/// `SkipCorrupt` from the checkpoint, which indexes records it never reads:
/// every read of the damaged record's context failed with `Corrupt`, so the
/// mode meant to get past damage did not.
#[test]
fn skip_corrupt_reads_past_damage_a_checkpoint_covers() {
    let dir = tmp();
    // No background merge: the segment damaged below is the one written.
    let plain = || Options::default().maintenance(None);
    let store = Store::open(dir.path(), plain()).unwrap();
    for i in 0..4 {
        for c in ["a", "b"] {
            store
                .append_message("t", c, format!("{c}{i}").as_bytes())
                .unwrap();
        }
    }
    store.close().unwrap();
    let seg = segment_files(dir.path()).pop().unwrap();
    let bytes = fs::read(&seg).unwrap();
    // In the records, past the header (whose random store id may hold the
    // same two bytes).
    let header = HEADER_LEN as usize;
    let at = header + bytes[header..].windows(2).position(|w| w == b"a2").unwrap();
    flip(&seg, at);

    // Strict trusts the checkpoint: the damage is found when read.
    let strict = Store::open(dir.path(), plain()).unwrap();
    assert!(strict.open_report().from_checkpoint);
    assert!(matches!(
        strict.last_messages("t", "a", 10),
        Err(Error::Corrupt { .. })
    ));
    drop(strict);
    // SkipCorrupt reads every record, skips the damaged one, serves the rest.
    let options = plain().recovery(RecoveryMode::SkipCorrupt);
    let store = Store::open(dir.path(), options).unwrap();
    let report = store.open_report();
    assert!(!report.from_checkpoint);
    assert!(report.checkpoint_ignored.is_some());
    assert_eq!(report.skipped.len(), 1, "{report:?}");
    let raws = |c| {
        store
            .last_messages("t", c, 10)
            .unwrap()
            .into_iter()
            .map(|m| String::from_utf8(m.raw).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(raws("a"), ["a0", "a1", "a3"]);
    assert_eq!(raws("b"), ["b0", "b1", "b2", "b3"]);
}
