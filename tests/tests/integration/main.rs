//! Integration tests: every tool through the real host and real components.

mod smoke;
