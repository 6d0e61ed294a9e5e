//! The events feed on SQLite (see `storage/events.rs` for what it promises).
//!
//! - **Written by the writer, in the write's transaction** (`log.rs`). The
//!   one writer thread assigns ids itself, in the order it applies the
//!   writes, so ids ascend in commit order; a group that rolls back gives
//!   its ids back, so committed ids are consecutive. After a commit, memory
//!   is changed, then the head (the largest committed id) is sent, then the
//!   group is answered: a client that got its answer finds its events.
//! - **Stored in the file, and every retained event in memory**
//!   (`retained.rs`): the floor, a tally, and the events in columns, 18 bytes
//!   each, loaded at start-up. A page is read there (`pages.rs`), under the
//!   same lock as a page of pets, and costs about as much at any depth.
//! - **Never past the head.** A page reads the head first and examines no
//!   id above it, so it never returns an id below which one could still
//!   appear. A pet's name and category, and an order's `placed_at`, never
//!   change: an event's data comes from memory, which holds every pet and
//!   order an event up to the head is about.
//! - **Answered straight from memory** (`pages.rs`): a page of the feed
//!   is written as JSON from the columns, with no event in between; an
//!   event read a second time lately is kept as JSON, which the next page
//!   with it copies (`recent.rs`).
//! - **Purged as a prefix** (`log.rs`): the smallest ids while they are
//!   older than asked, the floor raised in the same transaction, then
//!   memory's retained events and tally.

mod log;
mod pages;
mod recent;
mod retained;
#[cfg(test)]
mod tests;

pub(super) use log::{EventLog, purge};
pub(super) use pages::memory_page;
pub(super) use retained::Feed;
