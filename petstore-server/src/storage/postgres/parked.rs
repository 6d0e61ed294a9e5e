//! Where PostgreSQL's scout finds the kinds of new events for the polls
//! parked at the head (`storage/parked.rs`): one statement a tick for all
//! of them, over the primary key's range of the events written since the
//! last look, once per instance, and only while polls are parked. Tracking
//! the kinds in the database instead (an index on `(kind, id)`, or a row
//! per kind) would cost every write.

use std::sync::Arc;

use super::shared::SharedConnections;
use crate::storage::parked::{EventKinds, Found};
use crate::storage::{EventKind, StorageError};

/// Reads the kinds of new events on the instance's shared connections.
pub(super) struct Scouting(pub Arc<SharedConnections>);

impl EventKinds for Scouting {
    async fn last_of_each(&mut self, from: i64, to: i64) -> Result<Found, StorageError> {
        let doing = "reading the kinds of new events";
        let shared = self.0.get().await?;
        let rows = shared
            .run(
                doing,
                shared
                    .client
                    .query(&shared.events.kinds_between, &[&from, &to]),
            )
            .await?;
        let mut found = Found {
            kinds: Vec::with_capacity(rows.len()),
            floor: 0,
        };
        for row in &rows {
            let code: i16 = row.try_get(0).map_err(super::postgres(doing))?;
            let id: i64 = row.try_get(1).map_err(super::postgres(doing))?;
            match code {
                0 => found.floor = id,
                code => found.kinds.push((
                    EventKind::from_code(code.into())
                        .ok_or(StorageError::Invariant("an event of an unknown kind"))?,
                    id,
                )),
            }
        }
        Ok(found)
    }
}
