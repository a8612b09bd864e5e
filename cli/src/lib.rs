//! The `siesta` command's library: the local dev server (so tests can start it
//! in-process on an ephemeral port) and the client for `siesta runs`.

pub mod bench;
pub mod dev;
pub mod runs;
