//! End-to-end tests only; see `tests/`.
