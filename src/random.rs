//! Randomness from the operating system: store identities, ids the store
//! makes, render nonces.
//!
//! Drawn in blocks: each thread keeps the unused rest of one call's bytes
//! (at most [`BLOCK`]) and hands each byte out once, so the ids of about
//! sixteen sends cost one `getrandom` rather than four each. The bytes
//! are the operating system's either way; a child made by `fork` (a
//! Python process that forks after using the store) would inherit the
//! rest of its parent's block, so a block is only used by the process
//! that drew it. That check is a `getpid` per draw, itself a system call
//! (glibc keeps no copy of the pid), though about half the cost of a
//! small `getrandom` here.

use std::cell::RefCell;

use crate::error::{Error, Result};

/// Bytes drawn from the operating system at a time.
const BLOCK: usize = 256;

/// A thread's drawn bytes not yet handed out: `bytes[used..]`, drawn by
/// process `pid`.
struct Pool {
    bytes: [u8; BLOCK],
    used: usize,
    pid: u32,
}

thread_local! {
    static POOL: RefCell<Pool> = const {
        RefCell::new(Pool { bytes: [0; BLOCK], used: BLOCK, pid: 0 })
    };
}

/// `N` bytes from the operating system's randomness; `op` names what they
/// are for in the error.
pub(crate) fn bytes<const N: usize>(op: &'static str) -> Result<[u8; N]> {
    let mut out = [0u8; N];
    if N > BLOCK {
        draw(&mut out, op)?;
        return Ok(out);
    }
    // A thread whose locals are being destroyed draws directly.
    let pooled = POOL.try_with(|pool| {
        let mut pool = pool.borrow_mut();
        let pid = std::process::id();
        if pool.pid != pid || BLOCK - pool.used < N {
            draw(&mut pool.bytes, op)?;
            pool.used = 0;
            pool.pid = pid;
        }
        let start = pool.used;
        // Always in range: `used + N <= BLOCK` after the refill above.
        let taken = pool
            .bytes
            .get_mut(start..start + N)
            .ok_or(Error::Poisoned { cause: None })?;
        out.copy_from_slice(taken);
        // Handed out once: wiped, and never handed out again.
        taken.fill(0);
        pool.used = start + N;
        Ok(out)
    });
    match pooled {
        Ok(drawn) => drawn,
        Err(_) => draw(&mut out, op).map(|()| out),
    }
}

/// Fills `into` from the operating system.
fn draw(into: &mut [u8], op: &'static str) -> Result<()> {
    getrandom::fill(into).map_err(|e| Error::Io {
        op,
        path: "getrandom".into(),
        source: std::io::Error::other(e.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_two_draws_repeat_across_refills() {
        // Past several blocks, with sizes that do not divide the block.
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let a = bytes::<16>("test").unwrap();
            let b = bytes::<8>("test").unwrap();
            assert!(seen.insert(a.to_vec()), "a 16-byte draw repeated");
            assert!(seen.insert(b.to_vec()), "an 8-byte draw repeated");
        }
    }

    #[test]
    fn a_draw_larger_than_a_block_is_filled() {
        let big = bytes::<{ BLOCK * 2 }>("test").unwrap();
        // 512 random bytes all zero: probability 2^-4096.
        assert!(big.iter().any(|&b| b != 0));
    }
}
