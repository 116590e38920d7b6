//! Tables, JSON and plain lines on stdout. A closed pipe (`hopper ... | head`) is not an error.

use std::io::{IsTerminal, Write};

use comfy_table::{ContentArrangement, Table, presets};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
}

/// Colour only on a terminal, and never with NO_COLOR.
pub fn colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

pub fn print(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Pretty JSON, written as it is made: a large report is never held in memory as text.
pub fn json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    serde_json::to_writer_pretty(&mut out, value).map_err(|e| match e.io_error_kind() {
        Some(kind) => anyhow::Error::from(std::io::Error::from(kind)),
        None => anyhow::Error::from(e),
    })?;
    out.write_all(b"\n")?;
    Ok(out.flush()?)
}

pub fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(presets::UTF8_BORDERS_ONLY)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.to_vec());
    if !colour() {
        t.force_no_tty();
    }
    t
}

/// Wraps text in an ANSI colour when colour is on.
pub fn paint(text: &str, ansi: &str) -> String {
    if colour() { format!("\x1b[{ansi}m{text}\x1b[0m") } else { text.to_string() }
}

/// A name or message from a spec or a broker, safe to print on a terminal: control characters
/// (an escape sequence, a newline, a NUL) are shown as escapes, never written raw.
pub fn safe(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(crate::model::is_unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(
        text.chars()
            .map(|c| if crate::model::is_unsafe_char(c) { c.escape_unicode().to_string() } else { c.to_string() })
            .collect(),
    )
}

pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

#[cfg(test)]
mod tests {
    #[test]
    fn nothing_that_rewrites_a_terminal_is_printed_raw() {
        for name in ["esc\u{1b}[2J", "rtl\u{202e}gnp.exe", "zero\u{200b}width", "nul\0"] {
            let shown = super::safe(name);
            assert!(!shown.chars().any(crate::model::is_unsafe_char), "{shown:?}");
        }
        assert_eq!(super::safe("orders.dlq -> é"), "orders.dlq -> é");
    }
}
