//! `siesta new DIR`: a Siesta app of the user's own — a crate whose one binary serves
//! `dev` and the four Lambda roles, a `hello` workflow and its test, a SAM template and a
//! README. It builds and passes its tests as written.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail, ensure};

/// Where the new app gets Siesta's crates from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A local checkout (its root, absolute).
    Path(PathBuf),
    /// A git repository.
    Git(String),
}

impl Source {
    /// The checkout this `siesta` was built from, if it is still there: what
    /// `siesta new` uses when given neither `--siesta-path` nor `--siesta-git`.
    pub fn this_checkout() -> Option<Source> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?;
        root.join("shared/app/Cargo.toml")
            .is_file()
            .then(|| Source::Path(root.to_owned()))
    }

    /// The dependency on Siesta's crate `package` (at `dir` in the checkout), as a
    /// Cargo.toml inline table.
    fn dependency(&self, dir: &str) -> String {
        match self {
            Source::Path(root) => format!("{{ path = {} }}", toml_string(&root.join(dir))),
            Source::Git(url) => format!("{{ git = {} }}", toml_str(url)),
        }
    }
}

/// The files of a new app, by path relative to its directory, with `{{…}}` placeholders.
const FILES: &[(&str, &str)] = &[
    ("Cargo.toml", include_str!("../templates/new/Cargo.toml")),
    ("build.rs", include_str!("../templates/new/build.rs")),
    ("src/main.rs", include_str!("../templates/new/src/main.rs")),
    ("src/lib.rs", include_str!("../templates/new/src/lib.rs")),
    (
        "src/hello.rs",
        include_str!("../templates/new/src/hello.rs"),
    ),
    (
        "tests/hello.rs",
        include_str!("../templates/new/tests/hello.rs"),
    ),
    (
        "infra/template.yaml",
        include_str!("../templates/new/infra/template.yaml"),
    ),
    ("README.md", include_str!("../templates/new/README.md")),
    (".gitignore", include_str!("../templates/new/.gitignore")),
];

/// The versions Siesta is built and tested with, so a new app starts on them (Cargo
/// drops what the app does not use and adds what it does).
const LOCKFILE: &str = include_str!("../../Cargo.lock");

/// Every path `siesta new` writes, in order.
pub fn file_names() -> impl Iterator<Item = &'static str> {
    FILES
        .iter()
        .map(|(name, _)| *name)
        .chain(std::iter::once("Cargo.lock"))
}

/// Create the app in `dir` (which must not exist, or be empty), named after its last
/// component, depending on Siesta from `source`. Prints what it wrote and what to run.
pub fn scaffold(dir: &Path, source: &Source) -> anyhow::Result<()> {
    let name = crate_name(dir)?;
    if dir.exists() {
        let empty = std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .next()
            .is_none();
        ensure!(empty, "{} exists and is not empty", dir.display());
    }
    if let Source::Path(root) = source {
        ensure!(
            root.join("shared/app/Cargo.toml").is_file(),
            "{} is not a Siesta checkout (no shared/app/Cargo.toml)",
            root.display()
        );
    }
    for (path, template) in FILES {
        write(dir, path, &render(template, &name, source))?;
    }
    write(dir, "Cargo.lock", LOCKFILE)?;
    println!("created {name} in {}:", dir.display());
    for path in file_names() {
        println!("  {path}");
    }
    println!(
        "\nnext:\n  cd {}\n  cargo test\n  cargo run -- dev",
        dir.display()
    );
    Ok(())
}

/// `template` with its placeholders filled in.
pub fn render(template: &str, name: &str, source: &Source) -> String {
    template
        .replace("{{name}}", name)
        .replace("{{crate}}", &name.replace('-', "_"))
        .replace("{{siesta}}", &source.dependency("shared/siesta"))
        .replace("{{siesta-app}}", &source.dependency("shared/app"))
        .replace("{{siesta-build}}", &source.dependency("shared/build"))
        .replace("{{siesta-testing}}", &source.dependency("shared/testing"))
}

fn write(dir: &Path, path: &str, text: &str) -> anyhow::Result<()> {
    let path = dir.join(path);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}

/// The crate's name: the directory's last component, which Cargo must accept as a
/// package name and Rust as a crate name once `-` is `_`.
pub fn crate_name(dir: &Path) -> anyhow::Result<String> {
    let Some(name) = dir.file_name().and_then(|n| n.to_str()) else {
        bail!("{} does not end in a name", dir.display());
    };
    let valid = name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    ensure!(
        valid,
        "`{name}` cannot name a crate: use lowercase letters, digits, `-` and `_`, starting with a letter"
    );
    ensure!(
        !matches!(
            name,
            "test" | "build" | "siesta" | "self" | "crate" | "super"
        ),
        "`{name}` is taken (a Rust keyword, a Cargo target name or a Siesta crate); pick another"
    );
    Ok(name.to_owned())
}

fn toml_str(s: &str) -> String {
    let escaped: String = s
        .chars()
        .flat_map(|c| match c {
            '"' => vec!['\\', '"'],
            '\\' => vec!['\\', '\\'],
            c => vec![c],
        })
        .collect();
    format!("\"{escaped}\"")
}

fn toml_string(path: &Path) -> String {
    toml_str(&path.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_name_becomes_the_crate_name() {
        assert_eq!(crate_name(Path::new("/tmp/x/my-app")).unwrap(), "my-app");
        for bad in ["My App", "1app", "app!", "siesta", "test"] {
            assert!(crate_name(Path::new(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_placeholder_is_filled_in() {
        for source in [
            Source::Path("/src/siesta".into()),
            Source::Git("https://example.com/siesta.git".into()),
        ] {
            for (path, template) in FILES {
                let text = render(template, "my-app", &source);
                assert!(!text.contains("{{"), "{path}: {text}");
            }
        }
        let cargo = render(FILES[0].1, "my-app", &Source::Path("/src/siesta".into()));
        assert!(
            cargo.contains(r#"siesta-app = { path = "/src/siesta/shared/app" }"#),
            "{cargo}"
        );
        let main = render(FILES[2].1, "my-app", &Source::Path("/src/siesta".into()));
        assert!(main.contains("my_app::workflows()"), "{main}");
    }

    #[test]
    fn a_path_with_quotes_stays_one_toml_string() {
        assert_eq!(toml_str(r#"C:\a "b""#), r#""C:\\a \"b\"""#);
    }

    /// A template without its comments and top-level description, the functions'
    /// binary named `BINARY`: what must be the same in ours and a new app's.
    fn resources_and_settings(template: &str) -> Vec<String> {
        let mut in_description = false;
        template
            .lines()
            .filter(|line| {
                if line.starts_with("Description:") {
                    in_description = true;
                } else if in_description && !line.starts_with("  ") {
                    in_description = false;
                }
                !in_description && !line.trim_start().starts_with('#')
            })
            .map(|line| match line.split_once("Binary: ") {
                Some((indent, _)) => format!("{indent}Binary: BINARY"),
                None => line.to_owned(),
            })
            .collect()
    }

    #[test]
    fn the_new_apps_template_is_siestas_own_but_for_the_binary_and_the_prose() {
        let ours = resources_and_settings(include_str!("../../infra/template.yaml"));
        let theirs = resources_and_settings(include_str!("../templates/new/infra/template.yaml"));
        assert!(ours.len() > 400, "{}", ours.len());
        for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            assert_eq!(a, b, "line {i} of the comment-less templates differs");
        }
        assert_eq!(ours.len(), theirs.len());
    }
}
