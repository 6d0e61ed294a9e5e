//! The canned responses the ceiling serves.
//!
//! The bench captures them from the real server once per dataset, right
//! after seeding, and writes them as JSON; `bench-ceiling` (which includes
//! this file with `#[path]`) reads them and replays the same status, headers
//! and body bytes. Only data lives here, so both crates can share it.

use serde::{Deserialize, Serialize};

/// One captured response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Canned {
    /// The HTTP status code.
    pub status: u16,
    /// Headers in the order the server sent them, without those the HTTP
    /// layer writes itself (`date`, `content-length`, `connection`, ...).
    pub headers: Vec<(String, String)>,
    /// The body, byte for byte (the API only ever sends UTF-8 JSON).
    pub body: String,
}

/// Everything the ceiling answers, one response per route.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CannedSet {
    /// `GET /v1/pets?limit=20`.
    pub list20: Canned,
    /// `GET /v1/pets?limit=100&status=available`.
    pub list100_available: Canned,
    /// `GET /v1/pets?status=pending&limit=20&after=ID` (ID 90 % into the
    /// catalogue).
    pub list20_deep: Canned,
    /// `GET /v1/pets/{id}`: one representative body, for every id in
    /// `1..=max_id`.
    pub get: Canned,
    /// The highest id `get` answers; other ids get 404.
    pub max_id: i64,
    /// `POST /v1/pets`.
    pub create: Canned,
    /// Any request without the right bearer key.
    pub unauthorized: Canned,
    /// `POST /v1/store/orders`: a `placed` order, for any animal.
    pub place_order: Canned,
    /// `PATCH /v1/store/orders/{id}`: a `cancelled` order, for any order.
    pub update_order: Canned,
    /// `GET /v1/store/inventory`.
    pub inventory: Canned,
    /// Where the feed's pages read.
    pub feed: FeedCursors,
    /// `GET /v1/events?limit=20&after=START`.
    pub events_page: Canned,
    /// `GET /v1/events?limit=20&after=DEEP`.
    pub events_page_deep: Canned,
    /// `GET /v1/pets?limit=20&after=ID`: one representative page (after the
    /// catalogue's middle id), for every `ID`.
    pub list20_random: Canned,
    /// `GET /v1/events?limit=20&after=ID`: one representative page (after
    /// the event halfway from START to DEEP), for every other `ID`.
    pub events_page_random: Canned,
}

/// The cursors of the feed scenarios (since contract 1.6.0): event ids,
/// which are decimal digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedCursors {
    /// The feed's first event: `events_page` reads the 20 after it.
    pub start: u64,
    /// An event about 90 % into the seeded feed: `events_page_deep` reads
    /// the 20 after it.
    pub deep: u64,
}
