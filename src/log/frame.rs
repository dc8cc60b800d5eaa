//! Where a record is framed: the segment header and the record frame.
//!
//! All integers are little-endian. See DESIGN.md, "On-disk format".

/// Magic bytes at the start of every segment.
pub const SEGMENT_MAGIC: [u8; 8] = *b"CTXLSEG\0";
/// The segment format version this build writes.
pub const FORMAT_VERSION: u32 = 2;
/// The first format version, which this build still reads: a 32-byte
/// header without the store's identity or the link to the segment before.
pub const LEGACY_VERSION: u32 = 1;
/// Size of the segment header this build writes: records start here.
pub const HEADER_LEN: u64 = 64;
/// Size of a version 1 segment header.
pub const LEGACY_HEADER_LEN: u64 = 32;
/// Header flag: the segment was written by compaction (it is live only while
/// the manifest lists it).
pub const FLAG_COMPACTED: u32 = 1;
/// Size of a record frame's header (length, durable watermark, CRC).
pub const FRAME_HEADER_LEN: u64 = 12;

/// Why a frame or header does not validate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// Fewer bytes remain than the frame needs.
    Short,
    /// The length field is zero or above the limit.
    BadLength(u32),
    /// The checksum does not match.
    Checksum,
}

impl FrameError {
    /// A human-readable reason, for error messages.
    pub fn reason(&self) -> String {
        match self {
            FrameError::Short => "the record is cut short".to_string(),
            FrameError::BadLength(n) => format!("the record length {n} is out of range"),
            FrameError::Checksum => "the record checksum does not match".to_string(),
        }
    }
}

/// A store's identity: 128 random bits drawn when it was created, written
/// into every segment header, the manifest, the checkpoint and `IDENTITY`,
/// so that a file of another store is never taken for one of this store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct StoreId(pub [u8; 16]);

impl std::fmt::Display for StoreId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

/// The segment before a segment in its log, as it was when it was sealed:
/// its id and its length. An open compares them with the files it finds,
/// so that a segment that went missing or shrank is never taken for the
/// end of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// The segment's id.
    pub segment: u64,
    /// Its length once sealed.
    pub len: u64,
}

/// What a segment header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The format version.
    pub version: u32,
    /// The segment id.
    pub segment_id: u64,
    /// Flags ([`FLAG_COMPACTED`]).
    pub flags: u32,
    /// The store the segment belongs to (`None` in a version 1 header).
    pub store: Option<StoreId>,
    /// The segment before it in the log (`None`: none, not recorded, or a
    /// version 1 header).
    pub prev: Option<Link>,
}

impl SegmentHeader {
    /// Where the segment's first record starts.
    pub fn records_start(&self) -> u64 {
        if self.version == LEGACY_VERSION {
            LEGACY_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Whether compaction wrote the segment.
    pub fn compacted(&self) -> bool {
        self.flags & FLAG_COMPACTED != 0
    }
}

/// Why a segment header does not validate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// Fewer bytes than the header needs.
    Short,
    /// Wrong magic or checksum.
    Invalid,
}

/// Encodes a segment header of the current format version: segment `id`
/// of store `store`, with `flags`, following `prev` in its log.
pub fn encode_header(
    segment_id: u64,
    flags: u32,
    store: StoreId,
    prev: Option<Link>,
) -> [u8; HEADER_LEN as usize] {
    let prev = prev.unwrap_or(Link { segment: 0, len: 0 });
    let mut h = [0u8; HEADER_LEN as usize];
    h[0..8].copy_from_slice(&SEGMENT_MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
    h[16..24].copy_from_slice(&segment_id.to_le_bytes());
    h[24..28].copy_from_slice(&flags.to_le_bytes());
    h[28..44].copy_from_slice(&store.0);
    h[44..52].copy_from_slice(&prev.segment.to_le_bytes());
    h[52..60].copy_from_slice(&prev.len.to_le_bytes());
    let crc = crc32fast::hash(&h[0..60]);
    h[60..64].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Decodes a segment header from the start of `bytes`: version 2 (64
/// bytes) or version 1 (32). A header of another version is returned with
/// only its version read (its layout is unknown), for the caller to refuse.
pub fn decode_header(bytes: &[u8]) -> Result<SegmentHeader, HeaderError> {
    let head = bytes.get(0..12).ok_or(HeaderError::Short)?;
    if head[0..8] != SEGMENT_MAGIC {
        return Err(HeaderError::Invalid);
    }
    let version = le_u32(&head[8..12]);
    let len = match version {
        LEGACY_VERSION => LEGACY_HEADER_LEN,
        FORMAT_VERSION => HEADER_LEN,
        _ => {
            return Ok(SegmentHeader {
                version,
                segment_id: 0,
                flags: 0,
                store: None,
                prev: None,
            })
        }
    } as usize;
    let h = bytes.get(0..len).ok_or(HeaderError::Short)?;
    if le_u32(&h[len - 4..len]) != crc32fast::hash(&h[0..len - 4])
        || le_u32(&h[12..16]) as usize != len
    {
        return Err(HeaderError::Invalid);
    }
    let mut header = SegmentHeader {
        version,
        segment_id: le_u64(&h[16..24]),
        flags: le_u32(&h[24..28]),
        store: None,
        prev: None,
    };
    if version == FORMAT_VERSION {
        let mut store = [0u8; 16];
        store.copy_from_slice(&h[28..44]);
        header.store = Some(StoreId(store));
        let prev = le_u64(&h[44..52]);
        header.prev = (prev != 0).then(|| Link {
            segment: prev,
            len: le_u64(&h[52..60]),
        });
    }
    Ok(header)
}

/// The CRC of a frame: it covers where the frame lives (segment id and offset)
/// as well as its length, watermark and payload, so stale bytes from another
/// segment or another position can never validate here.
pub fn frame_crc(segment_id: u64, offset: u64, durable: u32, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&segment_id.to_le_bytes());
    h.update(&offset.to_le_bytes());
    h.update(&(payload.len() as u32).to_le_bytes());
    h.update(&durable.to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// Appends the frame of `payload` (to be written at `offset` of segment
/// `segment_id`) to `out`. `durable` is the watermark: every byte of the
/// segment before it was on disk when this frame was written.
pub fn encode_frame(segment_id: u64, offset: u64, durable: u32, payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&durable.to_le_bytes());
    out.extend_from_slice(&frame_crc(segment_id, offset, durable, payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// A frame that validated: where its payload is and where the next frame starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Offset of the frame within the segment.
    pub offset: u64,
    /// Length of the payload.
    pub len: u32,
    /// The durable watermark written with the frame.
    pub durable: u32,
}

impl Frame {
    /// Offset of the first payload byte.
    pub fn payload_start(&self) -> u64 {
        self.offset + FRAME_HEADER_LEN
    }

    /// Offset just past the frame.
    pub fn end(&self) -> u64 {
        self.payload_start() + u64::from(self.len)
    }

    /// The payload, in `segment` (the bytes the frame was decoded from;
    /// empty if they are not those).
    pub fn payload<'a>(&self, segment: &'a [u8]) -> &'a [u8] {
        segment
            .get(self.payload_start() as usize..self.end() as usize)
            .unwrap_or_default()
    }
}

/// Decodes the frame at `offset` of `segment` (the whole segment's bytes).
pub fn decode_frame(
    segment: &[u8],
    segment_id: u64,
    offset: u64,
    max_len: u32,
) -> Result<Frame, FrameError> {
    let start = usize::try_from(offset).map_err(|_| FrameError::Short)?;
    let head = segment
        .get(start..start.saturating_add(FRAME_HEADER_LEN as usize))
        .ok_or(FrameError::Short)?;
    let len = le_u32(&head[0..4]);
    if len == 0 || len > max_len {
        return Err(FrameError::BadLength(len));
    }
    let durable = le_u32(&head[4..8]);
    let frame = Frame {
        offset,
        len,
        durable,
    };
    if segment.len() < frame.end() as usize {
        return Err(FrameError::Short);
    }
    let payload = frame.payload(segment);
    if frame_crc(segment_id, offset, durable, payload) != le_u32(&head[8..12]) {
        return Err(FrameError::Checksum);
    }
    Ok(frame)
}

/// Checks a payload read on its own against the CRC stored in its frame header.
pub fn verify_payload(segment_id: u64, offset: u64, head: &[u8], payload: &[u8]) -> bool {
    head.len() == FRAME_HEADER_LEN as usize
        && le_u32(&head[0..4]) as usize == payload.len()
        && frame_crc(segment_id, offset, le_u32(&head[4..8]), payload) == le_u32(&head[8..12])
}

/// Whether the bytes of `segment` from `at` on are all zeros: the space the
/// writer zero-fills ahead of the newest segment's last frame, where no frame
/// starts (every frame holds a nonzero length and checksum).
pub fn is_preallocated(segment: &[u8], at: u64) -> bool {
    usize::try_from(at)
        .ok()
        .and_then(|at| segment.get(at..))
        .is_some_and(|rest| rest.iter().all(|&b| b == 0))
}

/// The offset of the first frame at or after `from` that validates, if any.
///
/// Used to tell a torn tail (nothing valid follows) from damage in the middle
/// (something valid follows), and to resynchronise when skipping damage.
pub fn find_next_frame(segment: &[u8], segment_id: u64, from: u64, max_len: u32) -> Option<u64> {
    let end = segment.len() as u64;
    let mut at = from;
    while at + FRAME_HEADER_LEN < end {
        if decode_frame(segment, segment_id, at, max_len).is_ok() {
            return Some(at);
        }
        at += 1;
    }
    None
}

/// Whether a valid frame after `at` carries a durable watermark past `at`,
/// proving that the bytes at `at` had been synced before it was written. A
/// bad frame in the newest segment that nothing vouches for lies in bytes
/// that were never synced, so never acknowledged: a torn tail (the one rule
/// both an open and a verify apply).
pub fn vouched_for(segment: &[u8], segment_id: u64, at: u64, max_len: u32) -> bool {
    let mut from = at + 1;
    while let Some(next) = find_next_frame(segment, segment_id, from, max_len) {
        match decode_frame(segment, segment_id, next, max_len) {
            Ok(frame) if u64::from(frame.durable) > at => return true,
            Ok(frame) => from = frame.end(),
            Err(_) => from = next + 1,
        }
    }
    false
}

/// Follows length fields from `from` to count the frames that had started in
/// a torn tail (at least one: there are bytes there).
pub fn count_started_frames(bytes: &[u8], from: u64, max_record: u32) -> u64 {
    let end = bytes.len() as u64;
    let mut at = from;
    let mut n = 0;
    while at < end {
        let len = u32_at(bytes, at as usize);
        // No frame starts here: zeros (preallocated space) or garbage.
        if len == 0 || len > max_record {
            break;
        }
        n += 1;
        at += FRAME_HEADER_LEN + u64::from(len);
    }
    n.max(1)
}

/// The little-endian u32 at `at` of `bytes`; 0 if they end before it.
pub(crate) fn u32_at(bytes: &[u8], at: usize) -> u32 {
    le_u32(bytes.get(at..at.saturating_add(4)).unwrap_or_default())
}

// The slices passed below always have the exact length, checked by the callers
// through `get`; a shorter one would read as zero rather than panic.
fn le_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    for (d, s) in a.iter_mut().zip(b) {
        *d = *s;
    }
    u32::from_le_bytes(a)
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    for (d, s) in a.iter_mut().zip(b) {
        *d = *s;
    }
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STORE: StoreId = StoreId([7; 16]);

    fn header(id: u64) -> [u8; HEADER_LEN as usize] {
        encode_header(id, 0, STORE, None)
    }

    fn segment_with(payloads: &[&[u8]], id: u64) -> Vec<u8> {
        let mut seg = header(id).to_vec();
        for p in payloads {
            let off = seg.len() as u64;
            encode_frame(id, off, HEADER_LEN as u32, p, &mut seg);
        }
        seg
    }

    #[test]
    fn header_round_trips_and_rejects_damage() {
        let link = Link {
            segment: 6,
            len: 4096,
        };
        let h = encode_header(7, FLAG_COMPACTED, STORE, Some(link));
        let want = SegmentHeader {
            version: FORMAT_VERSION,
            segment_id: 7,
            flags: FLAG_COMPACTED,
            store: Some(STORE),
            prev: Some(link),
        };
        assert_eq!(decode_header(&h), Ok(want));
        assert_eq!(decode_header(&h).unwrap().records_start(), HEADER_LEN);
        assert_eq!(decode_header(&h[..63]), Err(HeaderError::Short));
        for i in 0..h.len() {
            let mut bad = h;
            bad[i] ^= 1;
            assert!(decode_header(&bad) != Ok(want), "byte {i}");
        }
        assert_eq!(decode_header(&header(7)).unwrap().prev, None);
    }

    #[test]
    fn a_version_1_header_still_reads() {
        let mut h = [0u8; 32];
        h[0..8].copy_from_slice(&SEGMENT_MAGIC);
        h[8..12].copy_from_slice(&1u32.to_le_bytes());
        h[12..16].copy_from_slice(&32u32.to_le_bytes());
        h[16..24].copy_from_slice(&5u64.to_le_bytes());
        let crc = crc32fast::hash(&h[0..28]);
        h[28..32].copy_from_slice(&crc.to_le_bytes());
        let got = decode_header(&h).unwrap();
        assert_eq!(
            (got.version, got.segment_id, got.store, got.records_start()),
            (1, 5, None, 32)
        );
        h[20] ^= 1;
        assert_eq!(decode_header(&h), Err(HeaderError::Invalid));
    }

    #[test]
    fn frames_decode_in_sequence() {
        let seg = segment_with(&[b"one", b"two!"], 3);
        let a = decode_frame(&seg, 3, HEADER_LEN, 100).unwrap();
        assert_eq!(a.len, 3);
        let b = decode_frame(&seg, 3, a.end(), 100).unwrap();
        assert_eq!(b.len, 4);
        assert_eq!(b.end(), seg.len() as u64);
        assert_eq!(decode_frame(&seg, 3, b.end(), 100), Err(FrameError::Short));
    }

    #[test]
    fn a_frame_moved_to_another_segment_or_offset_fails() {
        let seg = segment_with(&[b"payload"], 3);
        assert_eq!(
            decode_frame(&seg, 4, HEADER_LEN, 100),
            Err(FrameError::Checksum)
        );
        let mut shifted = seg.clone();
        shifted.insert(HEADER_LEN as usize, 0);
        assert!(decode_frame(&shifted, 3, HEADER_LEN + 1, 100).is_err());
    }

    #[test]
    fn zero_filled_space_never_validates() {
        let mut seg = header(1).to_vec();
        seg.extend_from_slice(&[0u8; 64]);
        assert_eq!(
            decode_frame(&seg, 1, HEADER_LEN, 100),
            Err(FrameError::BadLength(0))
        );
        assert_eq!(find_next_frame(&seg, 1, HEADER_LEN, 100), None);
    }

    #[test]
    fn resync_finds_the_frame_after_damage() {
        let mut seg = segment_with(&[b"first", b"second"], 9);
        let second = decode_frame(&seg, 9, HEADER_LEN, 100).unwrap().end();
        seg[HEADER_LEN as usize + 13] ^= 0xff;
        assert!(decode_frame(&seg, 9, HEADER_LEN, 100).is_err());
        assert_eq!(find_next_frame(&seg, 9, HEADER_LEN, 100), Some(second));
    }
}
