//! For an app's build script (`build.rs`): a hash of the app's sources, set as the
//! compile-time variable `SIESTA_BUILD_HASH` that [`siesta_app::build_id!`] reads. Every
//! run records the build id it started on, so the same sources give the same id on every
//! machine and any change to them gives another.
//!
//! The whole of an app's `build.rs`'s `main`:
//!
//! ```no_run
//! siesta_build::emit_source_hash(&["src", "Cargo.toml", "Cargo.lock"]);
//! ```
//!
//! It has no dependencies, so it adds nothing to a build but itself.
//!
//! [`siesta_app::build_id!`]: https://docs.rs/siesta-app

use std::io;
use std::path::{Path, PathBuf};

/// Hash `paths` (files, and directories walked recursively; relative to the crate's
/// manifest directory; missing ones skipped), print `cargo:rustc-env=SIESTA_BUILD_HASH=…`
/// and ask Cargo to run the build script again when any of them changes.
pub fn emit_source_hash(paths: &[&str]) {
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    for path in paths {
        println!("cargo:rerun-if-changed={path}");
    }
    let hash = match source_hash(&root, paths) {
        Ok(hash) => format!("{hash:016x}"),
        Err(e) => {
            println!("cargo:warning=siesta-build: hashing the sources: {e}");
            return;
        }
    };
    println!("cargo:rustc-env=SIESTA_BUILD_HASH={hash}");
}

/// The 64-bit FNV-1a hash of `paths` under `root`: every file's path (relative to
/// `root`, `/`-separated) and contents, in sorted order, so it depends on nothing but
/// them.
pub fn source_hash(root: &Path, paths: &[&str]) -> io::Result<u64> {
    let mut files = Vec::new();
    for path in paths {
        collect(root, &root.join(path), &mut files)?;
    }
    files.sort();
    let mut hash = Fnv1a::default();
    for (name, path) in files {
        hash.write(name.as_bytes());
        hash.write(&[0]);
        hash.write(&std::fs::read(path)?);
        hash.write(&[0]);
    }
    Ok(hash.0)
}

fn collect(root: &Path, path: &Path, files: &mut Vec<(String, PathBuf)>) -> io::Result<()> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            collect(root, &entry?.path(), files)?;
        }
    } else {
        let name = path
            .strip_prefix(root)
            .unwrap_or(path)
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        files.push((name, path.to_owned()));
    }
    Ok(())
}

/// FNV-1a, 64 bits: tiny, and the same on every platform and toolchain (std's hasher
/// promises neither).
struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    #[test]
    fn the_same_sources_hash_the_same_wherever_they_are() {
        let a = tree(&[("src/main.rs", "fn main() {}"), ("src/a/b.rs", "x")]);
        let b = tree(&[("src/a/b.rs", "x"), ("src/main.rs", "fn main() {}")]);
        assert_eq!(
            source_hash(a.path(), &["src"]).unwrap(),
            source_hash(b.path(), &["src"]).unwrap()
        );
    }

    #[test]
    fn a_changed_byte_or_a_renamed_file_changes_the_hash() {
        let base = tree(&[("src/main.rs", "fn main() {}")]);
        let edited = tree(&[("src/main.rs", "fn main() { }")]);
        let renamed = tree(&[("src/lib.rs", "fn main() {}")]);
        let h = |d: &tempfile::TempDir| source_hash(d.path(), &["src"]).unwrap();
        assert_ne!(h(&base), h(&edited));
        assert_ne!(h(&base), h(&renamed));
    }

    #[test]
    fn a_missing_path_is_skipped() {
        let a = tree(&[("src/main.rs", "fn main() {}")]);
        assert_eq!(
            source_hash(a.path(), &["src", "Cargo.lock"]).unwrap(),
            source_hash(a.path(), &["src"]).unwrap()
        );
    }
}
