//! One event, one log line: the server's log writer escapes line breaks
//! and control characters inside an event, so that no client-chosen
//! string (a push config's id, a contextId, a messageId, an error that
//! quotes one) can end a line and write a forged one after it (DESIGN.md
//! §12, "Logs").

use std::io::Write;

use tracing_subscriber::fmt::MakeWriter;

/// Makes, for each event, a writer that holds the formatted line and
/// writes it escaped to `inner` when dropped.
pub struct OneLine<M> {
    inner: M,
    /// Whether the formatter colours its output (its escape sequences are
    /// then kept; every other control character is escaped either way).
    ansi: bool,
}

impl<M> OneLine<M> {
    /// Lines written to what `inner` makes.
    pub fn new(inner: M, ansi: bool) -> Self {
        Self { inner, ansi }
    }
}

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for OneLine<M> {
    type Writer = Line<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        Line {
            out: self.inner.make_writer(),
            held: Vec::new(),
            ansi: self.ansi,
        }
    }
}

/// One event's line, held until the formatter is done with it.
pub struct Line<W: Write> {
    out: W,
    held: Vec<u8>,
    ansi: bool,
}

impl<W: Write> Write for Line<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.held.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<W: Write> Drop for Line<W> {
    fn drop(&mut self) {
        let line = escape(&self.held, self.ansi);
        // A log line that cannot be written has nowhere else to go.
        let _ = self.out.write_all(&line);
    }
}

/// `held` with every control character but a final line break (and, with
/// `ansi`, the escape that starts a colour) written as `\n`, `\r`, `\t` or
/// `\u{..}`.
fn escape(held: &[u8], ansi: bool) -> Vec<u8> {
    let (body, end) = match held.strip_suffix(b"\n") {
        Some(body) => (body, &b"\n"[..]),
        None => (held, &b""[..]),
    };
    let mut out = Vec::with_capacity(held.len() + 8);
    for &b in body {
        match b {
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x1b if ansi => out.push(b),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\u{{{b:x}}}").as_bytes()),
            _ => out.push(b),
        }
    }
    out.extend_from_slice(end);
    out
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_client_string_cannot_start_a_log_line_of_its_own() {
        let captured = Captured::default();
        let sink = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(OneLine::new(move || sink.clone(), false))
            .with_ansi(false)
            .finish();
        let forged =
            "c1\n2026-12-07T00:00:00.000000Z  WARN ctxlog_server: the admin token is x\r\u{1b}[2J";
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(config = %forged, "a push config is failing");
            tracing::info!("next");
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].contains(r"c1\n2026-12-07"), "{text}");
        assert!(lines[0].contains(r"x\r\u{1b}[2J"), "{text}");
        assert!(lines[1].ends_with("next"), "{text}");
    }

    #[test]
    fn escaping_keeps_the_final_line_break_and_colours_when_asked() {
        assert_eq!(escape(b"a\nb\n", false), b"a\\nb\n");
        assert_eq!(escape(b"a\tb", false), b"a\\tb");
        assert_eq!(escape(b"\x1b[1mx\x1b[0m\n", true), b"\x1b[1mx\x1b[0m\n");
        assert_eq!(escape(b"\x1b[1m\x00\n", false), b"\\u{1b}[1m\\u{0}\n");
    }
}
