//! Integration tests: every tool through the real host and real components, in one test binary.

mod audit;
mod chains;
mod conformance;
mod content_index;
mod docs;
mod edit_file;
mod encodings;
mod escapes;
mod example_tool;
mod governance;
mod inspect;
mod languages;
mod limits;
mod list_files;
mod loading;
mod locks;
mod move_delete;
mod patches;
mod races;
mod read_file;
mod recovery;
mod search_files;
mod shared_store;
mod split;
mod transactions;
mod write_file;
