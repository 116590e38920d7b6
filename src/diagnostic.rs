//! Spec errors rendered like rustc's: file:line:col, what is wrong, a caret under it, a hint.

use std::io::{IsTerminal, Write};
use std::ops::Range;
use std::path::PathBuf;

use codespan_reporting::diagnostic::{Diagnostic as Rendered, Label};
use codespan_reporting::files::{Files, SimpleFiles};
use codespan_reporting::term::{self, termcolor};

/// Index of a file in [`Sources`].
pub type FileId = usize;

/// Every spec file read in one run, kept so that errors can quote them.
#[derive(Default)]
pub struct Sources {
    /// As read, for parsing.
    texts: Vec<String>,
    paths: Vec<PathBuf>,
    /// As quoted in diagnostics, made only when there is one to show (most runs have none:
    /// a copy and a line index of every file was 3% of a 500-topology diff).
    files: std::sync::OnceLock<SimpleFiles<String, String>>,
}

impl Sources {
    pub fn add(&mut self, path: PathBuf, text: String) -> FileId {
        self.paths.push(path);
        self.texts.push(text);
        // A file added after a diagnostic was shown is shown too.
        self.files.take();
        self.texts.len() - 1
    }

    /// The files as diagnostics quote them: every character that could rewrite a terminal
    /// replaced by as many `?` as it has bytes, so that spans still fall where they should.
    fn files(&self) -> &SimpleFiles<String, String> {
        self.files.get_or_init(|| {
            let mut files = SimpleFiles::new();
            for (path, text) in self.iter() {
                files.add(crate::output::safe(&path.display().to_string()).into_owned(), shown(text));
            }
            files
        })
    }

    pub fn len(&self) -> usize {
        self.paths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    pub fn text(&self, file: FileId) -> &str {
        self.texts.get(file).map_or("", String::as_str)
    }

    pub fn path(&self, file: FileId) -> &std::path::Path {
        &self.paths[file]
    }

    /// Every file as read: its path and its text.
    pub fn iter(&self) -> impl Iterator<Item = (&std::path::Path, &str)> {
        self.paths.iter().map(PathBuf::as_path).zip(self.texts.iter().map(String::as_str))
    }
}

/// One problem in a spec, pointing at the bytes that cause it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: FileId,
    pub span: Range<usize>,
    pub message: String,
    /// Short text under the caret.
    pub label: String,
    pub hint: Option<String>,
    /// A second place worth showing, such as the first definition of a duplicate.
    pub related: Option<(FileId, Range<usize>, String)>,
}

impl Diagnostic {
    pub fn new(file: FileId, span: Range<usize>, message: impl Into<String>) -> Self {
        Diagnostic { file, span, message: message.into(), label: String::new(), hint: None, related: None }
    }

    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn related(mut self, file: FileId, span: Range<usize>, label: impl Into<String>) -> Self {
        self.related = Some((file, span, label.into()));
        self
    }
}

/// A text as shown, built one character at a time only when some character must be replaced: a
/// string for every character once took most of the time of quoting 10,000 spec files.
fn shown(text: &str) -> String {
    let keep = |c: char| matches!(c, '\n' | '\r' | '\t') || !crate::model::is_unsafe_char(c);
    if text.chars().all(keep) {
        return text.to_string();
    }
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        if keep(c) {
            shown.push(c);
        } else {
            shown.extend(std::iter::repeat_n('?', c.len_utf8()));
        }
    }
    shown
}

/// A spec that cannot be used, with everything wrong in it.
pub struct SpecError {
    pub sources: Sources,
    pub diagnostics: Vec<Diagnostic>,
}

/// Where a diagnostic points, 1-based, as an editor shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    pub path: PathBuf,
    pub line: usize,
    pub column: usize,
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.path.display(), self.line, self.column)
    }
}

impl SpecError {
    pub fn position(&self, d: &Diagnostic) -> Position {
        let loc = self.sources.files().location(d.file, d.span.start).expect("diagnostic span lies inside its file");
        Position { path: self.sources.path(d.file).to_path_buf(), line: loc.line_number, column: loc.column_number }
    }

    /// The diagnostics as rustc would print them, without colour.
    pub fn render_plain(&self) -> String {
        let mut out = String::new();
        for d in &self.diagnostics {
            term::emit_to_string(&mut out, &term::Config::default(), self.sources.files(), &to_rendered(d))
                .expect("diagnostic spans lie inside their files");
        }
        out
    }

    /// Writes every diagnostic to stderr, in colour only on a terminal and never with NO_COLOR.
    pub fn emit(&self) {
        let choice = if std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none() {
            termcolor::ColorChoice::Auto
        } else {
            termcolor::ColorChoice::Never
        };
        // Buffered: rendering writes piece by piece, and a long name would otherwise be one
        // system call per byte.
        let mut stream = termcolor::BufferedStandardStream::stderr(choice);
        for d in &self.diagnostics {
            let _ =
                term::emit_to_write_style(&mut stream, &term::Config::default(), self.sources.files(), &to_rendered(d));
        }
        let n = self.diagnostics.len();
        let _ = writeln!(
            stream,
            "error: the spec has {n} error{}; nothing was changed on the broker",
            if n == 1 { "" } else { "s" }
        );
        let _ = stream.flush();
    }
}

fn to_rendered(d: &Diagnostic) -> Rendered<FileId> {
    let mut labels = vec![Label::primary(d.file, d.span.clone()).with_message(d.label.clone())];
    if let Some((file, span, label)) = &d.related {
        labels.push(Label::secondary(*file, span.clone()).with_message(label.clone()));
    }
    let mut rendered = Rendered::error().with_message(d.message.clone()).with_labels(labels);
    if let Some(hint) = &d.hint {
        rendered = rendered.with_notes(vec![format!("hint: {hint}")]);
    }
    rendered
}
