//! How many instances share every budget: each beats into the database
//! every [`HEARTBEAT`] and counts those that beat lately (PostgreSQL's
//! `instances` table; SQLite has one server per file, so 1). A failed beat
//! keeps the last count: the database being away changes no budget.

use std::sync::Arc;
use std::time::Duration;

use super::Limits;
use crate::storage::KeyStorage;

/// How often an instance says it is alive and recounts the others. A
/// new or stopped instance is counted by every other within this plus the
/// liveness window (`storage/postgres`: 2 s; a clean stop is forgotten at
/// once).
pub const HEARTBEAT: Duration = Duration::from_millis(500);

/// Idle addresses are forgotten every this many beats (10 s).
const PRUNE_EVERY: u32 = 20;

/// Beats as `instance` and keeps `limits`' count of instances current,
/// until dropped; forgets idle addresses on the way.
pub async fn keep_count(
    limits: Arc<Limits>,
    storage: Arc<dyn KeyStorage>,
    instance: String,
    log: slog::Logger,
) {
    let mut ticks = tokio::time::interval(HEARTBEAT);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    let mut beats = 0u32;
    loop {
        ticks.tick().await;
        match storage.heartbeat(&instance).await {
            Ok(instances) => {
                if failing {
                    failing = false;
                    slog::info!(log, "rate limits: counting instances again"; "instances" => instances);
                }
                limits.set_instances(instances);
            }
            Err(error) if !failing => {
                failing = true;
                slog::warn!(log, "rate limits: cannot count the instances; keeping the last count";
                    "error" => %petstore_api::error::chain(&error));
            }
            Err(_) => {}
        }
        beats = beats.wrapping_add(1);
        if beats.is_multiple_of(PRUNE_EVERY) {
            limits.budgets.forget_idle();
        }
    }
}
