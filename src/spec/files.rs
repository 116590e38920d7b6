//! Spec files from the command line: files, directories of `*.toml`, and `-` for standard
//! input. Everything named is read or refused with a reason; what is not read is said
//! (`Skipped`), except a directory's hidden files and files of other kinds (`README.md`).

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::LoadError;
use crate::diagnostic::Sources;

/// The largest spec file hopper reads: far above any real spec (100,000 topologies fit in a
/// few MB), far below what would hurt a CI runner. `/dev/zero` and its like are not files.
pub const MAX_SPEC_BYTES: u64 = 64 << 20;

/// How a spec read from standard input is named in diagnostics.
pub const STDIN_NAME: &str = "<stdin>";

/// Something named or found that hopper did not read, and why; the command says it on stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skipped {
    /// The same file (device and inode) named again, by this path or another: read once, so
    /// that `hopper lint a.toml a.toml` or `dir/ dir/a.toml` is not "defined twice".
    SameFile { path: PathBuf, first: PathBuf },
    /// A directory inside a directory given: hopper does not recurse (as `kubectl apply -f`
    /// without `-R`, and Terraform with a module's subdirectories), so a subdirectory can hold
    /// what is not meant to be applied; name it to read it.
    Subdirectory(PathBuf),
    /// A name ending in `.toml` in another case (`orders.TOML`): `*.toml` is the rule, as it is
    /// for every other tool on a case-sensitive file system.
    OtherCase(PathBuf),
}

/// Reads every file the paths name, in order; a directory's `*.toml` files in name order; `-`,
/// standard input (once). Also what was not read, in the order it was met.
pub fn read(paths: &[PathBuf]) -> Result<(Sources, Vec<Skipped>), LoadError> {
    let mut sources = Sources::default();
    let mut skipped = Vec::new();
    let stdin = std::path::Path::new("-");
    if paths.iter().filter(|p| p.as_path() == stdin).count() > 1 {
        return Err(LoadError::Io("`-` (standard input) is named twice; it can be read only once".into()));
    }
    // Only several paths, or a link among a directory's entries, can name one file twice; a
    // `stat` of each of 10,000 plain files is not free.
    let mut seen: Option<std::collections::HashMap<(u64, u64), PathBuf>> = (paths.len() > 1).then(Default::default);
    for path in paths {
        if path.as_path() == stdin {
            let text = read_limited(std::io::stdin().lock(), STDIN_NAME)?;
            sources.add(PathBuf::from(STDIN_NAME), text);
            continue;
        }
        let (files, links) = expand(std::slice::from_ref(path), &mut skipped)?;
        if links && seen.is_none() {
            seen = Some(Default::default());
        }
        for file in files {
            if let Some(seen) = &mut seen {
                let meta = std::fs::metadata(&file).map_err(|e| io(&file, "cannot read", &e))?;
                if let Some(first) = seen.get(&(meta.dev(), meta.ino())) {
                    skipped.push(Skipped::SameFile { path: file, first: first.clone() });
                    continue;
                }
                seen.insert((meta.dev(), meta.ino()), file.clone());
            }
            let text = read_one(&file)?;
            sources.add(file, text);
        }
    }
    Ok((sources, skipped))
}

/// Why a file hopper would write (`apply --out`) must not be written there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Clash {
    /// It is this spec file of the run, by any path (a link, `./`, `..`, a directory given).
    Replaces(PathBuf),
    /// It would be a new `*.toml` in this spec directory of the run, read as a spec next time.
    JoinsDirectory(PathBuf),
}

/// Whether writing `out` would replace a spec file that `paths` name or that a directory among
/// them holds, or add one to such a directory.
pub fn clash(out: &Path, paths: &[PathBuf]) -> Option<Clash> {
    let target = std::fs::metadata(out).ok().filter(|m| m.is_file());
    let same = |m: &std::fs::Metadata| target.as_ref().is_some_and(|t| m.dev() == t.dev() && m.ino() == t.ino());
    let name = out.file_name()?.to_string_lossy().into_owned();
    let read_from_a_directory = !name.starts_with('.') && name.ends_with(".toml");
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let parent = std::fs::metadata(parent).ok();
    for path in paths.iter().filter(|p| p.as_os_str() != "-") {
        let Ok(meta) = std::fs::metadata(path) else { continue };
        if meta.is_file() && same(&meta) {
            return Some(Clash::Replaces(path.clone()));
        }
        let is_parent = parent.as_ref().is_some_and(|p| p.dev() == meta.dev() && p.ino() == meta.ino());
        if meta.is_dir() && is_parent && read_from_a_directory {
            return Some(if target.is_some() {
                Clash::Replaces(path.join(&name))
            } else {
                Clash::JoinsDirectory(path.clone())
            });
        }
    }
    None
}

/// The files the paths name, and whether a directory's entries included a symbolic link.
fn expand(paths: &[PathBuf], skipped: &mut Vec<Skipped>) -> Result<(Vec<PathBuf>, bool), LoadError> {
    let mut files = Vec::new();
    let mut links = false;
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
                if name.starts_with('.') {
                    continue;
                }
                let file = entry.path();
                // The directory's own record says which entries are plain files, without a
                // `stat` each (10,000 specs are 10,000 calls); links are followed.
                let plain = entry.file_type().is_ok_and(|t| t.is_file());
                if !name.ends_with(".toml") {
                    let toml_in_another_case = name.len() > 5
                        && name.is_char_boundary(name.len() - 5)
                        && name[name.len() - 5..].eq_ignore_ascii_case(".toml");
                    if toml_in_another_case {
                        skipped.push(Skipped::OtherCase(file));
                    } else if !plain && kind_of(&file).is_ok_and(|k| k == Kind::Directory) {
                        skipped.push(Skipped::Subdirectory(file));
                    }
                    continue;
                }
                links |= !plain;
                match if plain { Kind::File } else { kind_of(&file)? } {
                    Kind::File => found.push((entry.file_name(), file)),
                    other => return Err(not_a_file(&file, other)),
                }
            }
            if found.is_empty() {
                return Err(LoadError::Io(format!(
                    "{} holds no *.toml files; give a spec file or a directory of them",
                    path.display()
                )));
            }
            // By name alone: the parent is the same, so this is the paths' order, without
            // splitting each path into components at every comparison (`hopper lint` of 10,000
            // files: 80 M of its 2.07 G instructions).
            found.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
            files.extend(found.into_iter().map(|(_, path)| path));
        } else if kind == Kind::File {
            files.push(path.clone());
        } else {
            return Err(not_a_file(path, kind));
        }
    }
    Ok((files, links))
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
    read_limited(file, &path.display().to_string())
}

/// Room for a typical spec file: `take` hides the file's size from `read_to_end`, which then
/// started with a 32-byte read and doubled, five reads for a 300-byte file. With room ready, a
/// small file takes one read and one more to see its end.
const FIRST_READ: usize = 16 << 10;

/// At most MAX_SPEC_BYTES of UTF-8 text; `name` says where from, in errors.
fn read_limited(source: impl Read, name: &str) -> Result<String, LoadError> {
    let mut bytes = Vec::with_capacity(FIRST_READ);
    source
        .take(MAX_SPEC_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| LoadError::Io(format!("cannot read {name}: {e}")))?;
    if bytes.len() as u64 > MAX_SPEC_BYTES {
        return Err(LoadError::Io(format!(
            "{name} is larger than {} MiB, the most a spec file may be; split it into several files",
            MAX_SPEC_BYTES >> 20
        )));
    }
    // Kept for the whole run: 10,000 files of 300 bytes should not hold 160 MB.
    bytes.shrink_to_fit();
    String::from_utf8(bytes).map_err(|e| {
        LoadError::Io(format!(
            "{name} is not UTF-8 text (invalid byte at offset {}); TOML files are UTF-8",
            e.utf8_error().valid_up_to()
        ))
    })
}

fn io(path: &Path, what: &str, e: &std::io::Error) -> LoadError {
    LoadError::Io(format!("{what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory's files come in the order of their paths (bytes: upper case first, `-`
    /// before `.` before digits), which is the order their diagnostics are reported in.
    #[test]
    fn a_directory_is_read_in_the_order_of_its_paths() {
        let dir = std::env::temp_dir().join(format!("hopper-files-order-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let names = ["b.toml", "a-b.toml", "a.toml", "é.toml", "a.b.toml", "B.toml", "a0.toml", "a.toml.toml"];
        for name in names {
            std::fs::write(dir.join(name), "").unwrap();
        }
        let Ok((files, _)) = expand(std::slice::from_ref(&dir), &mut Vec::new()) else {
            panic!("{} could not be read", dir.display())
        };
        std::fs::remove_dir_all(&dir).unwrap();

        let mut by_path: Vec<PathBuf> = names.iter().map(|n| dir.join(n)).collect();
        by_path.sort();
        assert_eq!(files, by_path);
        let read: Vec<_> = files.iter().map(|f| f.file_name().unwrap().to_str().unwrap()).collect();
        assert_eq!(read, ["B.toml", "a-b.toml", "a.b.toml", "a.toml", "a.toml.toml", "a0.toml", "b.toml", "é.toml"]);
    }
}
