//! The `siesta` command's library: the client for `siesta runs`, `siesta bench`, and
//! what `siesta new` writes.

pub mod bench;
pub mod new;
pub mod runs;
