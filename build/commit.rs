//! Which commit a source tree is, for `hopper --version`. Shared by build.rs and a test, which
//! runs it outside any repository.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Set by whoever builds from a tarball and knows the commit (a packager).
pub const OVERRIDE: &str = "HOPPER_BUILD_COMMIT";

pub struct Found {
    /// The short commit, or `None` when the tree is not a git checkout of its own.
    pub commit: Option<String>,
    /// Files whose change means another commit (HEAD, the branch's ref, packed refs).
    pub watch: Vec<PathBuf>,
}

impl Found {
    /// What `--version` shows in parentheses.
    pub fn version_text(&self) -> String {
        match &self.commit {
            Some(c) => format!("commit {c}"),
            None => "commit unknown: not built from a git checkout".to_string(),
        }
    }
}

/// The commit of the checkout whose top is `dir`.
pub fn find(dir: &Path) -> Found {
    if let Ok(commit) = std::env::var(OVERRIDE)
        && !commit.trim().is_empty()
    {
        return Found { commit: Some(commit.trim().to_string()), watch: Vec::new() };
    }
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
        if !out.status.success() {
            return None;
        }
        let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (!text.is_empty()).then_some(text)
    };
    let unknown = Found { commit: None, watch: Vec::new() };
    // A tarball unpacked inside another repository is not that repository's commit.
    let Some(top) = git(&["rev-parse", "--show-toplevel"]) else { return unknown };
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(Path::new(&top), dir) {
        return unknown;
    }
    let Some(commit) = git(&["rev-parse", "--short", "HEAD"]) else { return unknown };
    let mut watch = Vec::new();
    let mut path = |name: &str| {
        // Only files that exist: cargo reruns a build script for a missing one every time.
        if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", name]).map(PathBuf::from)
            && p.exists()
        {
            watch.push(p);
        }
    };
    path("HEAD");
    path("packed-refs");
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        path(&branch);
    }
    Found { commit: Some(commit), watch }
}
