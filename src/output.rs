//! Tables, JSON and plain lines on stdout. A closed pipe (`hopper ... | head`) is not an error.
//! Text for people goes through `print`, which `-q` silences; what programs read (JSON, DOT,
//! definitions, completions) through `json`, `document` and `data`, which it never does.
//! `-v` narrates on stderr what hopper is doing.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU8, Ordering};

use comfy_table::{ContentArrangement, Table, presets};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Table => "table",
            Format::Json => "json",
        }
    }
}

/// The version of every JSON document hopper prints (and of its plan files). It changes when a
/// field is removed, renamed or changes type; a new field does not change it.
pub const SCHEMA_VERSION: u32 = 1;

/// How much hopper says besides its result (`-q`, `-v`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    /// Errors and machine output only.
    Quiet = 0,
    Normal = 1,
    /// Also what hopper is doing, on stderr.
    Verbose = 2,
}

static VERBOSITY: AtomicU8 = AtomicU8::new(Verbosity::Normal as u8);

/// Set once, from the command line, before anything is printed.
pub fn set_verbosity(v: Verbosity) {
    VERBOSITY.store(v as u8, Ordering::Relaxed);
}

pub fn verbosity() -> Verbosity {
    match VERBOSITY.load(Ordering::Relaxed) {
        0 => Verbosity::Quiet,
        1 => Verbosity::Normal,
        _ => Verbosity::Verbose,
    }
}

/// With `-v`, one line on stderr about what hopper is doing; made only when it is shown.
pub fn narrate(line: impl FnOnce() -> String) {
    if verbosity() == Verbosity::Verbose {
        eprintln!("hopper: {}", line().lines().map(safe).collect::<Vec<_>>().join("\n        "));
    }
}

/// Writes a file whole or not at all, by a temporary file beside it, flushed to disk and renamed
/// over it: a run killed mid-write (or a power loss) leaves the old file (or none), never half
/// of the new one. A link is written through, to the file it names; a file that was there keeps
/// its permissions (a plan kept 0600 stays 0600).
pub fn write_whole(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let path = match std::fs::canonicalize(path) {
        Ok(target) if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) => target,
        _ => path.to_path_buf(),
    };
    let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name"));
    };
    let temporary = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(bytes)?;
        if let Ok(old) = std::fs::metadata(&path) {
            file.set_permissions(old.permissions())?;
        }
        file.sync_all()?;
        std::fs::rename(&temporary, &path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

/// Colour only on a terminal, and never with NO_COLOR.
pub fn colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// Text for people; nothing with `-q`.
pub fn print(text: &str) -> std::io::Result<()> {
    if verbosity() == Verbosity::Quiet {
        return Ok(());
    }
    data(text)
}

/// Output a program reads (DOT, a man page, a completion script): printed even with `-q`.
pub fn data(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// A JSON document of hopper's own: `schema_version` first, then the fields of `body` (a
/// struct or a map).
pub fn document<T: Serialize>(body: &T) -> anyhow::Result<()> {
    #[derive(Serialize)]
    struct Document<'a, T: Serialize> {
        schema_version: u32,
        #[serde(flatten)]
        body: &'a T,
    }
    json(&Document { schema_version: SCHEMA_VERSION, body })
}

/// A JSON document of hopper's own holding one list: `{"schema_version": 1, FIELD: [...]}`,
/// written as it is made (the list is never copied).
pub fn listing<T: Serialize + ?Sized>(field: &'static str, items: &T) -> anyhow::Result<()> {
    struct Listing<'a, T: ?Sized>(&'static str, &'a T);
    impl<T: Serialize + ?Sized> Serialize for Listing<'_, T> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeMap;
            let mut map = s.serialize_map(Some(1))?;
            map.serialize_entry(self.0, self.1)?;
            map.end()
        }
    }
    document(&Listing(field, items))
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
    // A table wraps to the terminal it is printed on; piped, or with NO_COLOR, it keeps the
    // width of its content.
    if colour()
        && let Some((terminal_size::Width(width), _)) = terminal_size::terminal_size_of(std::io::stdout())
    {
        t.set_width(width);
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
