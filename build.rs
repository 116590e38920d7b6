//! Puts the commit hopper is built from into `hopper --version`. Never fails the build: outside a
//! git checkout (a tarball, a vendored copy), without git, or inside someone else's repository,
//! the version says so instead.

#[path = "build/commit.rs"]
mod commit;

use std::path::Path;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let found = commit::find(Path::new(&dir));
    println!("cargo:rustc-env=HOPPER_COMMIT={}", found.version_text());
    // Rebuilt when the checkout moves to another commit, and never otherwise.
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build/commit.rs");
    println!("cargo:rerun-if-env-changed={}", commit::OVERRIDE);
    for path in found.watch {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
