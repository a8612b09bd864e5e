//! The build id every run records: this crate's version and a hash of its sources
//! (`siesta_app::build_id!` reads it).

fn main() {
    siesta_build::emit_source_hash(&["src", "Cargo.toml", "Cargo.lock"]);
}
