//! The search engine for hard-to-round cases (see `shared/ALGORITHMS.md`).
