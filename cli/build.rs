//! The examples app's build id: its sources and the examples' (see `siesta-build`).

fn main() {
    siesta_build::emit_source_hash(&["src", "Cargo.toml", "../workflows/src"]);
}
