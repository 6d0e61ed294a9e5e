//! The keys a running server accepts, kept current without a restart.
//!
//! The accepted set lives in memory behind an [`ArcSwap`]: a request's
//! check loads it without a lock and without awaiting. A background task
//! re-reads the stored keys every [`REFRESH_INTERVAL`] and swaps in a new
//! set, so a key created, revoked or expired takes effect on every instance
//! within about that interval (expiry is also checked on every request).
//! The same task writes the keys' last use to the database, in one batch
//! per interval, never on the request's path.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use http::HeaderMap;
use petstore_api::scopes::Scopes;

use crate::budget::KeyLimits;
use crate::keys::{AcceptedKey, ApiKeys, AuthFailure, KeyCounts, KeyDigest, KeySet};
use crate::metrics::Metrics;
use crate::storage::outage::Outage;
use crate::storage::{KeyStorage, StorageError, StoredKey};

/// How often each instance re-reads the stored keys. A change takes effect
/// everywhere within this plus the time of one read (documented: 2 s).
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(1);

/// Unix seconds now.
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs() as i64)
}

/// Who sent an accepted request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The key's name, as the access log shows it.
    pub name: Arc<str>,
    /// The key's digest: what stays the same for one key across reloads,
    /// restarts and instances.
    pub digest: KeyDigest,
    /// What the key may do.
    pub scopes: Scopes,
    /// What it sets of its own budget.
    pub limits: KeyLimits,
}

/// The live set of accepted keys.
pub struct Keyring {
    current: ArcSwap<KeySet>,
    environment: ApiKeys,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keyring({:?})", self.counts())
    }
}

impl Keyring {
    /// The keys of `PETSTORE_API_KEYS` and the stored keys.
    pub fn new(environment: ApiKeys, stored: &[StoredKey]) -> Keyring {
        let keyring = Keyring {
            current: ArcSwap::from_pointee(KeySet::default()),
            environment,
        };
        keyring.replace(stored);
        keyring
    }

    /// Checks a request's `Authorization` header now; the accepted key's
    /// name (for the access log) and digest. An in-memory lookup: never waits.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Caller, AuthFailure> {
        self.current
            .load()
            .authenticate(headers, unix_now())
            .map(|key| Caller {
                name: Arc::clone(&key.name),
                digest: key.digest,
                scopes: key.scopes,
                limits: key.limits,
            })
    }

    /// What the rate limiter needs of a request's key: its digest and its
    /// own budget. Unlike [`Keyring::authenticate`] it clones nothing
    /// (the name's reference count would bounce between cores on every
    /// request of a key; BENCHMARKS.md, issue 26).
    pub fn budget_of(&self, headers: &HeaderMap) -> Result<(KeyDigest, KeyLimits), AuthFailure> {
        self.current
            .load()
            .authenticate(headers, unix_now())
            .map(|key| (key.digest, key.limits))
    }

    /// What the key with digest `digest` may do now; refused once it is
    /// revoked (`Unknown`) or expired (what a webhook subscription it made
    /// may still receive, and what a long poll it began still sees, follow
    /// this).
    pub fn scopes_now(&self, digest: KeyDigest) -> Result<Scopes, AuthFailure> {
        self.current
            .load()
            .accepted(digest, unix_now())
            .map(|key| key.scopes)
    }

    /// How many keys of each state the server holds now.
    pub fn counts(&self) -> KeyCounts {
        let set = self.current.load();
        let usable = set.usable_at(unix_now());
        KeyCounts {
            usable,
            expired: set.keys().len() - usable,
            revoked: set.revoked(),
        }
    }

    /// Replaces the accepted set with the environment's keys and the stored
    /// keys that are not revoked. A key's record of last use carries over.
    fn replace(&self, stored: &[StoredKey]) {
        let old = self.current.load();
        let mut last_used: HashMap<&str, _> = old
            .keys()
            .iter()
            .map(|key| (&*key.name, Arc::clone(&key.last_used)))
            .collect();
        let mut keys: Vec<AcceptedKey> = self.environment.accepted().collect();
        for key in &mut keys {
            if let Some(used) = last_used.remove(&*key.name) {
                key.last_used = used;
            }
        }
        let mut revoked = 0;
        for key in stored {
            if key.revoked_at.is_some() {
                revoked += 1;
                continue;
            }
            keys.push(AcceptedKey {
                name: key.name.as_str().into(),
                digest: key.digest,
                expires_at: key.expires_at,
                scopes: key.scopes,
                limits: key.limits,
                last_used: last_used.remove(key.name.as_str()).unwrap_or_default(),
            });
        }
        self.current.store(Arc::new(KeySet::new(keys, revoked)));
    }

    /// The stored keys' uses since the last call, as `(name, time)`.
    fn uses_since(&self, flushed: &mut HashMap<Arc<str>, i64>) -> Vec<(String, i64)> {
        let set = self.current.load();
        // The environment's keys come first and are not stored.
        set.keys()
            .iter()
            .skip(self.environment.len())
            .filter_map(|key| {
                let used = key.last_used.load(Ordering::Relaxed);
                let before = flushed.insert(Arc::clone(&key.name), used);
                (used > 0 && before != Some(used)).then(|| (key.name.to_string(), used))
            })
            .collect()
    }

    /// Keeps the set current and records last use, every
    /// [`REFRESH_INTERVAL`], until the task is dropped. A failed read keeps
    /// the set in force; it is counted, and logged as an [`Outage`].
    pub async fn refresh(
        self: Arc<Self>,
        storage: Arc<dyn KeyStorage>,
        log: slog::Logger,
        metrics: Arc<Metrics>,
    ) {
        let mut flushed = HashMap::new();
        let outage = Outage::new("API keys", log);
        let mut ticks = tokio::time::interval(REFRESH_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match self.refresh_once(&*storage, &mut flushed).await {
                Ok(()) => outage.answered(),
                Err(error) => {
                    metrics.key_refresh_failed();
                    outage.failed(
                        "reloading the API keys (the keys loaded last stay in force)",
                        &error,
                    );
                }
            }
        }
    }

    /// Reloads the keys first, so that a change never waits behind the
    /// record of last use; then records the uses taken just before the
    /// reload (so that a key revoked by it keeps its last use). Either
    /// failing is reported, and neither stops the other.
    async fn refresh_once(
        &self,
        storage: &dyn KeyStorage,
        flushed: &mut HashMap<Arc<str>, i64>,
    ) -> Result<(), StorageError> {
        let uses = self.uses_since(flushed);
        let reloaded = storage
            .list_keys()
            .await
            .map(|stored| self.replace(&stored));
        let recorded = if uses.is_empty() {
            Ok(())
        } else {
            storage.record_key_use(uses).await.inspect_err(|_| {
                // Recorded again at the next successful flush.
                flushed.clear();
            })
        };
        reloaded.and(recorded)
    }

    /// Records the last use of every stored key that has one (at shutdown,
    /// so that the last second of use is not lost).
    pub async fn record_all_uses(&self, storage: &dyn KeyStorage) -> Result<(), StorageError> {
        let uses = self.uses_since(&mut HashMap::new());
        if uses.is_empty() {
            return Ok(());
        }
        storage.record_key_use(uses).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use http::header::AUTHORIZATION;

    fn stored(name: &str, key: &str, revoked: bool) -> StoredKey {
        StoredKey {
            name: name.into(),
            digest: KeyDigest::of(key),
            created_at: 0,
            expires_at: None,
            scopes: Scopes::ALL,
            limits: KeyLimits::default(),
            last_used_at: None,
            revoked_at: revoked.then_some(1),
        }
    }

    fn bearer(key: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {key}")).unwrap(),
        );
        headers
    }

    #[test]
    fn stored_and_environment_keys_are_accepted_by_name_until_revoked() {
        let keyring = Keyring::new(
            ApiKeys::parse("dev").unwrap(),
            &[stored("ci", "k-ci", false), stored("old", "k-old", true)],
        );
        let ci = keyring.authenticate(&bearer("k-ci")).unwrap();
        assert_eq!((&*ci.name, ci.digest), ("ci", KeyDigest::of("k-ci")));
        assert_eq!(
            &*keyring.authenticate(&bearer("dev")).unwrap().name,
            "PETSTORE_API_KEYS[1]"
        );
        assert_eq!(
            keyring.authenticate(&bearer("k-old")),
            Err(AuthFailure::Unknown)
        );
        keyring.replace(&[stored("ci", "k-ci", true)]);
        assert_eq!(
            keyring.authenticate(&bearer("k-ci")),
            Err(AuthFailure::Unknown)
        );
        assert_eq!(
            keyring.counts(),
            KeyCounts {
                usable: 1,
                expired: 0,
                revoked: 1
            }
        );
    }

    #[test]
    fn uses_are_reported_once_and_survive_a_reload() {
        let keyring = Keyring::new(ApiKeys::default(), &[stored("ci", "k-ci", false)]);
        let mut flushed = HashMap::new();
        assert!(keyring.uses_since(&mut flushed).is_empty());
        keyring.authenticate(&bearer("k-ci")).unwrap();
        keyring.replace(&[stored("ci", "k-ci", false)]);
        let uses = keyring.uses_since(&mut flushed);
        assert_eq!(uses.len(), 1);
        assert_eq!(uses[0].0, "ci");
        assert!(keyring.uses_since(&mut flushed).is_empty());
    }

    /// What every running instance promises (README, "API keys"): a key
    /// created, revoked or given other scopes is honoured within 2 s.
    const PROMISED: Duration = Duration::from_secs(2);

    /// How long [`StubKeys`] takes to read the keys: a slow database (the
    /// promise allows the refresh interval plus the time of one read).
    const READ: Duration = Duration::from_millis(500);

    /// Stored keys in memory, read as from a database: a read sees the
    /// keys as they were when it began, and takes [`READ`].
    struct StubKeys {
        keys: std::sync::Mutex<Vec<StoredKey>>,
        /// How many reads have begun.
        reads: tokio::sync::watch::Sender<usize>,
    }

    #[async_trait::async_trait]
    impl KeyStorage for StubKeys {
        async fn create_key(&self, _: StoredKey) -> Result<(), crate::storage::KeyError> {
            unreachable!("the keyring only reads keys")
        }

        async fn list_keys(&self) -> Result<Vec<StoredKey>, StorageError> {
            let keys = self.keys.lock().unwrap().clone();
            self.reads.send_modify(|reads| *reads += 1);
            tokio::time::sleep(READ).await;
            Ok(keys)
        }

        async fn revoke_key(
            &self,
            _: &str,
            _: i64,
        ) -> Result<crate::storage::Revoked, crate::storage::KeyError> {
            unreachable!("the keyring only reads keys")
        }

        async fn set_key_scopes(
            &self,
            _: &str,
            _: Scopes,
        ) -> Result<Scopes, crate::storage::KeyError> {
            unreachable!("the keyring only reads keys")
        }

        async fn set_key_limits(
            &self,
            _: &str,
            _: crate::budget::LimitsChange,
        ) -> Result<(KeyLimits, KeyLimits), crate::storage::KeyError> {
            unreachable!("the keyring only reads keys")
        }

        async fn heartbeat(&self, _: &str) -> Result<u32, StorageError> {
            unreachable!("the keyring does not beat")
        }

        async fn forget_instance(&self, _: &str) -> Result<(), StorageError> {
            unreachable!("the keyring does not beat")
        }

        async fn record_key_use(&self, _: Vec<(String, i64)>) -> Result<(), StorageError> {
            Ok(())
        }
    }

    /// Makes `change` to the stored keys at the worst moment, just after a
    /// read began (which misses it), then lets virtual time pass until the
    /// keyring `shows` it; returns how long that took. Fails if the keyring
    /// shows it at once, or before a read that began after the change has
    /// had the time to end (only a reload may show it), or not within
    /// twice the promise.
    async fn time_to_show(
        stub: &StubKeys,
        keyring: &Keyring,
        change: impl FnOnce(&mut Vec<StoredKey>),
        shows: impl Fn(&Keyring) -> bool,
    ) -> Duration {
        let mut reads = stub.reads.subscribe();
        let began = tokio::time::timeout(REFRESH_INTERVAL * 2, reads.changed());
        began
            .await
            .expect("the keys are read every interval")
            .unwrap();
        let missed_by = *reads.borrow_and_update();
        change(&mut stub.keys.lock().unwrap());
        let changed = tokio::time::Instant::now();
        assert!(!shows(keyring), "shown before any read saw the change");
        // On tokio's clock: in virtual time, checked every 10 ms of it.
        petstore_support::eventually_within("the change shown", PROMISED * 2, || shows(keyring))
            .await;
        let took = changed.elapsed();
        assert!(
            *reads.borrow() > missed_by,
            "shown with no read since the change"
        );
        assert!(
            took >= READ,
            "shown after {took:?}, before a read could end"
        );
        took
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_created_changed_limited_or_revoked_in_storage_is_honoured_within_2_s() {
        let stub = Arc::new(StubKeys {
            keys: Default::default(),
            reads: tokio::sync::watch::channel(0).0,
        });
        let keyring = Arc::new(Keyring::new(ApiKeys::default(), &[]));
        let storage: Arc<dyn KeyStorage> = Arc::clone(&stub) as _;
        let log = slog::Logger::root(slog::Discard, slog::o!());
        let metrics = Arc::new(Metrics::new(Default::default()));
        let refresh = tokio::spawn(Arc::clone(&keyring).refresh(storage, log, metrics));
        let caller = |keyring: &Keyring| keyring.authenticate(&bearer("k-ci"));

        let created = |keys: &mut Vec<StoredKey>| keys.push(stored("ci", "k-ci", false));
        let admitted = |keyring: &Keyring| caller(keyring).is_ok();
        let took = time_to_show(&stub, &keyring, created, admitted).await;
        assert!(took <= PROMISED, "a created key admitted after {took:?}");

        let reader: Scopes = "pets:read".parse().unwrap();
        let narrowed = |keys: &mut Vec<StoredKey>| keys[0].scopes = reader;
        let in_force = |keyring: &Keyring| caller(keyring).is_ok_and(|c| c.scopes == reader);
        let took = time_to_show(&stub, &keyring, narrowed, in_force).await;
        assert!(took <= PROMISED, "new scopes in force after {took:?}");

        let budget = KeyLimits {
            rate: Some("3/s".parse().unwrap()),
            ..KeyLimits::default()
        };
        let limited = |keys: &mut Vec<StoredKey>| keys[0].limits = budget;
        let in_force = |keyring: &Keyring| caller(keyring).is_ok_and(|c| c.limits == budget);
        let took = time_to_show(&stub, &keyring, limited, in_force).await;
        assert!(took <= PROMISED, "a new budget in force after {took:?}");

        let revoked = |keys: &mut Vec<StoredKey>| keys[0].revoked_at = Some(1);
        let refused = |keyring: &Keyring| caller(keyring) == Err(AuthFailure::Unknown);
        let took = time_to_show(&stub, &keyring, revoked, refused).await;
        assert!(took <= PROMISED, "a revoked key refused after {took:?}");
        refresh.abort();
    }
}
