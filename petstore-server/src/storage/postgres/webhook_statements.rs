//! The webhooks' schema and statements (`webhooks.rs` runs them, each
//! prepared once per pooled connection, but the fan-out, the claim and
//! the finish, which are planned at each execution: see their comments).

use crate::storage::webhooks::held_until;

/// Subscriptions and their deliveries. `kinds` holds the bits of the event
/// kinds; owners are 32 bytes; secrets sealed. A delivery's `resource` is
/// a pet's id or minus an order's. `webhook_deliveries_open` serves the
/// guard that keeps one resource's deliveries in event order,
/// `webhook_deliveries_due` the claims (replaced by [`CLAIM_INDEX`]),
/// `webhook_deliveries_finished` the purge. Deleting a subscription deletes
/// its deliveries.
pub(super) const MIGRATION: &str = "
    CREATE TABLE webhooks (
        id              BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        url             TEXT        NOT NULL,
        kinds           SMALLINT    NOT NULL,
        sees_owner      BYTEA,
        creator         BYTEA       NOT NULL,
        creator_name    TEXT        NOT NULL,
        state           TEXT        NOT NULL CHECK (state IN ('active', 'disabled')),
        disabled_reason TEXT,
        secret          BYTEA       NOT NULL,
        previous_secret BYTEA,
        previous_until  TIMESTAMPTZ,
        fanned_out      BIGINT      NOT NULL,
        created_at      TIMESTAMPTZ NOT NULL,
        last_success_at TIMESTAMPTZ,
        last_failure_at TIMESTAMPTZ,
        CHECK ((state = 'disabled') = (disabled_reason IS NOT NULL))
    );
    CREATE INDEX webhooks_by_creator ON webhooks (creator, id);
    CREATE TABLE webhook_deliveries (
        webhook_id   BIGINT      NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
        event_id     BIGINT      NOT NULL,
        kind         SMALLINT    NOT NULL,
        resource     BIGINT      NOT NULL,
        body         TEXT        NOT NULL,
        state        TEXT        NOT NULL
                     CHECK (state IN ('pending', 'sending', 'delivered', 'failed')),
        attempts     INTEGER     NOT NULL DEFAULT 0,
        next_at      TIMESTAMPTZ NOT NULL,
        lease_owner  TEXT,
        lease_until  TIMESTAMPTZ,
        last_status  INTEGER,
        last_error   TEXT,
        last_at      TIMESTAMPTZ,
        delivered_at TIMESTAMPTZ,
        PRIMARY KEY (webhook_id, event_id)
    );
    CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at)
        WHERE state IN ('pending', 'sending');
    CREATE INDEX webhook_deliveries_open ON webhook_deliveries (webhook_id, resource, event_id)
        WHERE state IN ('pending', 'sending');
    CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (last_at)
        WHERE state IN ('delivered', 'failed');";

/// The claims' index, per subscription in the order they are claimed: a
/// claim reads at most its limit of each subscription's due deliveries
/// from it, however many wait (see [`CLAIM`]).
pub(super) const CLAIM_INDEX: &str = "
    DROP INDEX webhook_deliveries_due;
    CREATE INDEX webhook_deliveries_due_per_webhook
        ON webhook_deliveries (webhook_id, next_at, event_id)
        WHERE state IN ('pending', 'sending');";

/// A subscription's columns of the row `w`, as `subscription_from_row`
/// reads them: with its open deliveries counted (subscriptions are few), or
/// with 0 in their place, for the fan-out, which reads every subscription
/// every second and needs no count (behind 150,000 open deliveries,
/// counting them took 70-93 ms a read: BENCHMARKS.md, issue 28, twentieth
/// pass).
macro_rules! subscription_columns {
    (counted) => {
        concat!(
            subscription_columns!(),
            ", (SELECT count(*) FROM webhook_deliveries d
                WHERE d.webhook_id = w.id AND d.state IN ('pending', 'sending'))"
        )
    };
    (uncounted) => {
        concat!(subscription_columns!(), ", 0::bigint")
    };
    () => {
        "w.id, w.url, w.kinds, w.sees_owner, w.creator, w.creator_name, w.state,
         w.disabled_reason, w.created_at, w.fanned_out, w.secret, w.previous_secret,
         w.previous_until, w.last_success_at, w.last_failure_at"
    };
}

/// "No earlier delivery of the same subscription and resource is open",
/// for the delivery `d`: what keeps one resource's deliveries in event
/// order. It also holds back a delivery whose earlier one another instance
/// is claiming right now: that row's version before the claim still reads
/// `pending`.
///
/// `OFFSET 0` keeps it a subquery run for each row (one probe of
/// `webhook_deliveries_open`, whose order the `ORDER BY` asks for, so
/// that the planner takes that index even without statistics), and the
/// planner counts on half the rows passing, so that it walks the claims'
/// index in order and stops at its limit. Without it, `NOT EXISTS` was
/// planned as an anti-join that, with statistics older than the backlog,
/// read every open delivery of the subscription for each row (a claim took
/// 26 s behind 20,000 open deliveries under writes); written as "`d` is
/// its resource's first open delivery", the equality's estimate made the
/// planner examine every due delivery (18 ms a claim behind 100,000, and
/// delivery at full load fell from 1,559 to 467 a second).
macro_rules! none_open_before {
    () => {
        "NOT EXISTS (SELECT 1 FROM webhook_deliveries e
                     WHERE e.webhook_id = d.webhook_id AND e.resource = d.resource
                       AND e.event_id < d.event_id AND e.state IN ('pending', 'sending')
                     ORDER BY e.webhook_id, e.resource, e.event_id OFFSET 0)"
    };
}

/// "`d`, read by its key, is in one of these states, and what follows
/// its state holds" (a boolean expression of `d`'s columns). Written as a
/// `CASE`, which the planner's proof of a partial index's predicate cannot
/// see through, so that the lookup can only take the primary key. A plain
/// `d.state = …` implies the partial indexes' `state IN ('pending',
/// 'sending')`, and with statistics older than the backlog the planner
/// took one of them, whose leading column alone the key bounds: it read
/// every open delivery of the subscription for each row (behind 17,000
/// open deliveries, a claim of 64 took 42 ms instead of 2.6 ms, and
/// recording 16 outcomes 4 ms instead of 1.6 ms: the costs grew with the
/// backlog they held up).
macro_rules! by_key_in_state {
    ($($state:literal => $holds:literal),+) => {
        concat!("CASE d.state", $(" WHEN '", $state, "' THEN ", $holds,)+ " ELSE false END")
    };
}

/// A new subscription, active, made now: its id and time.
pub(super) const CREATE: &str = "
    INSERT INTO webhooks (url, kinds, sees_owner, creator, creator_name, state, secret,
                          fanned_out, created_at)
    VALUES ($1, $2, $3, $4, $5, 'active', $6, $7, now())
    RETURNING id, created_at";

/// At most `$3` subscriptions after `$1`, in id order (`$2`'s when given).
pub(super) const LIST: &str = concat!(
    "SELECT ",
    subscription_columns!(counted),
    " FROM webhooks w
      WHERE w.id > $1 AND ($2::bytea IS NULL OR w.creator = $2)
      ORDER BY w.id LIMIT (SELECT $3::bigint)"
);

/// Every subscription by state, and the open deliveries (the partial
/// index `webhook_deliveries_due_per_webhook` holds just those).
pub(super) const COUNTS: &str = "
    SELECT count(*) FILTER (WHERE state = 'active'), count(*) FILTER (WHERE state = 'disabled'),
           (SELECT count(*) FROM webhook_deliveries WHERE state IN ('pending', 'sending'))
    FROM webhooks";

/// The subscription `$1` (`$2`'s when given).
pub(super) const GET: &str = concat!(
    "SELECT ",
    subscription_columns!(counted),
    " FROM webhooks w WHERE w.id = $1 AND ($2::bytea IS NULL OR w.creator = $2)"
);

/// Every active subscription, its open deliveries not counted.
pub(super) const ACTIVE: &str = concat!(
    "SELECT ",
    subscription_columns!(uncounted),
    " FROM webhooks w WHERE w.state = 'active' ORDER BY w.id"
);

/// The subscription `$1` (`$2`'s when given) with the secret `$4`, its
/// current one kept until `$3`.
pub(super) const ROTATE: &str = concat!(
    "WITH w AS (
         UPDATE webhooks SET previous_secret = secret, previous_until = $3, secret = $4
         WHERE id = $1 AND ($2::bytea IS NULL OR creator = $2)
         RETURNING *)
     SELECT ",
    subscription_columns!(counted),
    " FROM w"
);

/// The deliveries of subscription `$1` (if it is `$2`'s when given),
/// deleted before it: in the order a finish locks rows (its deliveries in
/// key order, then its subscription), so that the two never deadlock.
pub(super) const DELETE_DELIVERIES: &str = "
    DELETE FROM webhook_deliveries d USING (
        SELECT e.webhook_id, e.event_id
        FROM webhook_deliveries e JOIN webhooks w ON w.id = e.webhook_id
        WHERE w.id = $1 AND ($2::bytea IS NULL OR w.creator = $2)
        ORDER BY e.event_id
        FOR UPDATE OF e) held
    WHERE d.webhook_id = held.webhook_id AND d.event_id = held.event_id";

/// The subscription `$1` (`$2`'s when given); deliveries stored since the
/// statement above go with it.
pub(super) const DELETE: &str =
    "DELETE FROM webhooks WHERE id = $1 AND ($2::bytea IS NULL OR creator = $2)";

/// Moves subscription `$1`'s cursor from `$2` to `$3` and stores the
/// deliveries (`$4`… as columns), or, if the cursor is no longer at `$2`
/// (another instance moved it) or the subscription is disabled, does
/// neither. A concurrent move or disable waits for the row and re-reads
/// it. One row: 1 if it moved.
///
/// A delivery is due now, or, behind an open delivery of its resource,
/// when that one is ([`held_until!`]).
pub(super) const FAN_OUT: &str = concat!(
    "WITH moved AS (
        UPDATE webhooks SET fanned_out = $3
        WHERE id = $1 AND fanned_out = $2 AND state = 'active'
        RETURNING id),
    stored AS (
        INSERT INTO webhook_deliveries (webhook_id, event_id, kind, resource, body, state,
                                        next_at)
        SELECT moved.id, d.event_id, d.kind, d.resource, d.body, 'pending',
               greatest(now(), ",
    held_until!("moved.id", "d.resource"),
    ")
        FROM moved
        CROSS JOIN unnest($4::bigint[], $5::smallint[], $6::bigint[], $7::text[])
            AS d (event_id, kind, resource, body)
        ON CONFLICT DO NOTHING)
    SELECT count(*) FROM moved"
);

/// At most `$1` due deliveries (see `WebhookStorage::claim`) leased to
/// `$2` for `$3` seconds, with what sending them needs: the first in
/// (`next_at`, `event_id`) order, taken from each active subscription's
/// first few ([`CLAIM_INDEX`]), so that a claim costs the same behind a
/// backlog of any size; of each subscription at most its room (`$4`, or
/// the room of `$6` beside its id in `$5`). (One ordered query over every due row let the
/// planner sort them all whenever its statistics were older than the
/// backlog: 150 ms a claim behind 50,000, and delivery fell as the backlog
/// grew.) Four times `$1` candidates are read, and the first `$1` that no
/// other claim holds are locked, `SKIP LOCKED`: instances claiming at once
/// take disjoint rows without waiting, each finding rows the others left;
/// a row another claim changed and committed meanwhile is re-checked (now
/// `sending`, it is left out).
pub(super) const CLAIM: &str = concat!(
    "WITH candidates AS (
         SELECT d.webhook_id, d.event_id, d.next_at
         FROM webhooks w CROSS JOIN LATERAL (
             SELECT d.webhook_id, d.event_id, d.next_at FROM webhook_deliveries d
             WHERE d.webhook_id = w.id AND d.next_at <= now()
               AND d.state IN ('pending', 'sending')
               AND (d.state = 'pending' OR (d.state = 'sending' AND d.lease_until < now()))
               AND ",
    none_open_before!(),
    "
             ORDER BY d.next_at, d.event_id
             LIMIT least(4 * $1::bigint,
                         coalesce((SELECT f.room FROM unnest($5::bigint[], $6::bigint[])
                                       AS f (id, room)
                                   WHERE f.id = w.id),
                                  $4::bigint))) d
         WHERE w.state = 'active'
         ORDER BY d.next_at, d.event_id
         LIMIT 4 * $1::bigint),
     next AS (
         SELECT d.webhook_id, d.event_id, w.url, w.secret,
                CASE WHEN w.previous_until > now() THEN w.previous_secret END AS previous
         FROM candidates c
         JOIN webhook_deliveries d ON d.webhook_id = c.webhook_id AND d.event_id = c.event_id
         JOIN webhooks w ON w.id = d.webhook_id
         WHERE w.state = 'active' AND d.next_at <= now()
           AND ",
    by_key_in_state!("pending" => "true", "sending" => "d.lease_until < now()"),
    "
         ORDER BY c.next_at, c.event_id
         LIMIT $1::bigint
         FOR UPDATE OF d SKIP LOCKED)
     UPDATE webhook_deliveries d
     SET state = 'sending', attempts = d.attempts + 1, lease_owner = $2,
         lease_until = now() + make_interval(secs => $3)
     FROM next
     WHERE d.webhook_id = next.webhook_id AND d.event_id = next.event_id
     RETURNING d.webhook_id, d.event_id, d.attempts, next.url, d.body, next.secret,
               next.previous"
);

/// Records attempts, given as arrays, each entry one attempt: the attempt
/// `$4` of delivery (`$1`, `$2`), if `$3` still holds its lease: its state
/// `$5`, next attempt `$6`, status `$7`, error `$8`, time `$9` and end
/// `$11`; then on each subscription when it last succeeded or failed (the
/// latest, in whatever order finishes come), and the reason `$10` it is
/// disabled for, if any. A delivery put off to a retry puts off the later
/// pending deliveries of its resource, which wait for it, as far
/// (`held_until!` says why; one another claim or replay holds is left as
/// it is). Returns the attempts that counted.
///
/// One statement, its locks taken in one order: the deliveries' rows in
/// key order, then their subscriptions' in id order, as replays and
/// deletes take them, so that a batch deadlocks with none of them nor with
/// another instance's batch (the later deliveries a retry puts off are
/// only tried, `SKIP LOCKED`: they wait for nothing). A subscription's row
/// is only locked and written when it changes by a second or more, or is
/// disabled: every finish of a busy subscription would otherwise queue on
/// that one row.
pub(super) const FINISH_ALL: &str = concat!(
    "WITH attempt AS (
        SELECT * FROM unnest($1::bigint[], $2::bigint[], $4::integer[], $5::text[],
                             $6::timestamptz[], $7::integer[], $8::text[],
                             $9::timestamptz[], $10::text[], $11::timestamptz[])
            AS a(webhook_id, event_id, attempts, state, retry_at, status, error, at,
                 reason, ended)),
    held AS (
        SELECT a.*
        FROM webhook_deliveries d
        JOIN attempt a ON a.webhook_id = d.webhook_id AND a.event_id = d.event_id
                      AND a.attempts = d.attempts
        WHERE ",
    by_key_in_state!("sending" => "d.lease_owner = $3::text"),
    "
        ORDER BY d.webhook_id, d.event_id
        FOR UPDATE OF d),
    finished AS (
        UPDATE webhook_deliveries d
        SET state = a.state, next_at = coalesce(a.retry_at, d.next_at),
            lease_owner = NULL, lease_until = NULL, last_status = a.status,
            last_error = a.error, last_at = a.at,
            delivered_at = CASE WHEN a.state = 'delivered' THEN a.ended END
        FROM held a
        WHERE d.webhook_id = a.webhook_id AND d.event_id = a.event_id
        RETURNING d.webhook_id, d.event_id, d.resource, d.next_at, a.attempts, a.state,
                  a.reason, a.ended),
    later AS (
        SELECT l.webhook_id, l.event_id, f.next_at
        FROM finished f
        JOIN webhook_deliveries l ON l.webhook_id = f.webhook_id AND l.resource = f.resource
                                 AND l.event_id > f.event_id
        WHERE f.state = 'pending' AND l.state IN ('pending', 'sending')
          AND l.state = 'pending'
        ORDER BY l.webhook_id, l.event_id
        FOR UPDATE OF l SKIP LOCKED),
    -- `next_at` compared here, by key, not in `later`: there it let the
    -- planner read the subscription's open deliveries by `next_at`.
    pushed AS (
        UPDATE webhook_deliveries d SET next_at = l.next_at
        FROM later l
        WHERE d.webhook_id = l.webhook_id AND d.event_id = l.event_id
          AND d.next_at < l.next_at
        RETURNING 1),
    outcome AS (
        SELECT webhook_id,
               max(ended) FILTER (WHERE state = 'delivered') AS succeeded,
               max(ended) FILTER (WHERE state <> 'delivered') AS failed,
               max(reason) AS reason
        FROM finished GROUP BY webhook_id),
    changed AS (
        SELECT w.id, o.succeeded, o.failed, o.reason
        FROM webhooks w JOIN outcome o ON o.webhook_id = w.id
        WHERE o.reason IS NOT NULL
           OR coalesce(w.last_success_at, '-infinity') < o.succeeded - interval '1 second'
           OR coalesce(w.last_failure_at, '-infinity') < o.failed - interval '1 second'
        ORDER BY w.id
        FOR UPDATE OF w),
    subscription AS (UPDATE webhooks w SET
        last_success_at = greatest(w.last_success_at, c.succeeded),
        last_failure_at = greatest(w.last_failure_at, c.failed),
        state = CASE WHEN c.reason IS NULL THEN w.state ELSE 'disabled' END,
        disabled_reason = coalesce(c.reason, w.disabled_reason)
    FROM changed c WHERE w.id = c.id
    RETURNING 1)
    -- A data-modifying WITH runs to completion whether or not it is read.
    SELECT webhook_id, event_id, attempts FROM finished"
);

/// When a claim would next find a delivery (see `WebhookStorage::next_due`):
/// the earliest of each active subscription's first pending delivery, in
/// the claim's order, that nothing holds back (read as a claim reads, so
/// that it stops there, not at the end of the backlog); leases left out,
/// and the subscriptions of `$1`.
/// (`state IN (…)` is written out beside `state = 'pending'` as the
/// partial indexes' predicate, as in the claim.)
pub(super) const NEXT_DUE: &str = concat!(
    "SELECT min(p.next_at)
     FROM webhooks w CROSS JOIN LATERAL (
         SELECT d.next_at FROM webhook_deliveries d
         WHERE d.webhook_id = w.id AND d.state IN ('pending', 'sending')
           AND d.state = 'pending' AND ",
    none_open_before!(),
    "
         ORDER BY d.next_at, d.event_id
         LIMIT 1) p
     WHERE w.state = 'active' AND w.id <> ALL($1::bigint[])"
);

/// At most `$3` deliveries of subscription `$1` below event `$2`, newest
/// first.
pub(super) const LIST_DELIVERIES: &str = "
    SELECT event_id, kind, state, attempts, last_status, last_error, last_at, next_at,
           delivered_at
    FROM webhook_deliveries
    WHERE webhook_id = $1 AND event_id < $2
    ORDER BY event_id DESC LIMIT (SELECT $3::bigint)";

/// Stores the deliveries (`$2`… as columns, in event order) of
/// subscription `$1`, if it exists, as pending, due now, no attempt made;
/// those already stored are made so. Before the subscription is enabled:
/// in the order a finish locks rows.
pub(super) const REPLAY: &str = "
    INSERT INTO webhook_deliveries (webhook_id, event_id, kind, resource, body, state, next_at)
    SELECT w.id, d.event_id, d.kind, d.resource, d.body, 'pending', now()
    FROM webhooks w
    CROSS JOIN unnest($2::bigint[], $3::smallint[], $4::bigint[], $5::text[])
        AS d (event_id, kind, resource, body)
    WHERE w.id = $1
    ORDER BY d.event_id
    ON CONFLICT (webhook_id, event_id) DO UPDATE SET
        state = 'pending', attempts = 0, next_at = excluded.next_at, lease_owner = NULL,
        lease_until = NULL, delivered_at = NULL";

/// Makes subscription `$1` active.
pub(super) const ENABLE: &str =
    "UPDATE webhooks SET state = 'active', disabled_reason = NULL WHERE id = $1";

/// Deletes at most `$2` deliveries finished before `$1`; the condition is
/// checked again on the rows deleted, so one replayed meanwhile stays.
pub(super) const PURGE: &str = "
    DELETE FROM webhook_deliveries
    WHERE (webhook_id, event_id) IN (
              SELECT webhook_id, event_id FROM webhook_deliveries
              WHERE state IN ('delivered', 'failed') AND last_at < $1
              LIMIT $2)
      AND state IN ('delivered', 'failed') AND last_at < $1";
