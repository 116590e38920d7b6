//! Spec files from the command line: files, and directories of `*.toml`. Everything named is
//! read or refused with a reason; nothing is skipped in silence.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::LoadError;
use crate::diagnostic::Sources;

/// The largest spec file hopper reads: far above any real spec (100,000 topologies fit in a
/// few MB), far below what would hurt a CI runner. `/dev/zero` and its like are not files.
pub const MAX_SPEC_BYTES: u64 = 64 << 20;

/// Reads every file the paths name, in order; a directory's `*.toml` files in name order.
pub fn read(paths: &[PathBuf]) -> Result<Sources, LoadError> {
    let mut sources = Sources::default();
    for path in expand(paths)? {
        let text = read_one(&path)?;
        sources.add(path, text);
    }
    Ok(sources)
}

fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, LoadError> {
    let mut files = Vec::new();
    for path in paths {
        let kind = kind_of(path)?;
        if kind == Kind::Directory {
            let mut found = Vec::new();
            let entries = std::fs::read_dir(path).map_err(|e| io(path, "cannot read directory", &e))?;
            for entry in entries {
                let entry = entry.map_err(|e| io(path, "cannot read directory", &e))?;
                let name = entry.file_name();
                let name = name.to_string_lossy();
                // Editors' lock and backup files (`.#orders.toml`) are not specs.
                if name.starts_with('.') || !name.ends_with(".toml") {
                    continue;
                }
                let file = entry.path();
                match kind_of(&file)? {
                    Kind::File => found.push(file),
                    other => return Err(not_a_file(&file, other)),
                }
            }
            if found.is_empty() {
                return Err(LoadError::Io(format!(
                    "{} holds no *.toml files; give a spec file or a directory of them",
                    path.display()
                )));
            }
            found.sort();
            files.extend(found);
        } else if kind == Kind::File {
            files.push(path.clone());
        } else {
            return Err(not_a_file(path, kind));
        }
    }
    Ok(files)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Directory,
    /// A FIFO, a socket, a device: reading one may never end.
    Special,
}

/// What `path` is once symbolic links are followed; a dangling link or a loop is an error.
fn kind_of(path: &Path) -> Result<Kind, LoadError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(Kind::File),
        Ok(m) if m.is_dir() => Ok(Kind::Directory),
        Ok(_) => Ok(Kind::Special),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if std::fs::symlink_metadata(path).is_ok() {
                Err(LoadError::Io(format!("{} is a symbolic link to something that does not exist", path.display())))
            } else {
                Err(LoadError::Io(format!("{}: no such file or directory", path.display())))
            }
        }
        // ELOOP: too many levels of symbolic links.
        Err(e) if e.raw_os_error() == Some(40) => {
            Err(LoadError::Io(format!("{} is a symbolic link that loops back on itself", path.display())))
        }
        Err(e) => Err(io(path, "cannot read", &e)),
    }
}

fn not_a_file(path: &Path, kind: Kind) -> LoadError {
    let what = match kind {
        Kind::Directory => "a directory",
        _ => "not a regular file (a FIFO, socket or device)",
    };
    LoadError::Io(format!("{} is {what}; hopper reads spec files and directories of *.toml files", path.display()))
}

fn read_one(path: &Path) -> Result<String, LoadError> {
    let file = std::fs::File::open(path).map_err(|e| io(path, "cannot read", &e))?;
    let mut bytes = Vec::new();
    file.take(MAX_SPEC_BYTES + 1).read_to_end(&mut bytes).map_err(|e| io(path, "cannot read", &e))?;
    if bytes.len() as u64 > MAX_SPEC_BYTES {
        return Err(LoadError::Io(format!(
            "{} is larger than {} MiB, the most a spec file may be; split it into several files",
            path.display(),
            MAX_SPEC_BYTES >> 20
        )));
    }
    String::from_utf8(bytes).map_err(|e| {
        LoadError::Io(format!(
            "{} is not UTF-8 text (invalid byte at offset {}); TOML files are UTF-8",
            path.display(),
            e.utf8_error().valid_up_to()
        ))
    })
}

fn io(path: &Path, what: &str, e: &std::io::Error) -> LoadError {
    LoadError::Io(format!("{what} {}: {e}", path.display()))
}
