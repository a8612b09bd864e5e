//! The `siesta` command's library: the client for `siesta runs`, `siesta builds prune`,
//! `siesta bench`, and
//! what `siesta new` writes.

pub mod bench;
pub mod builds;
pub mod bulk;
pub mod new;
pub mod runs;
pub mod schedules;
pub mod workflows;
