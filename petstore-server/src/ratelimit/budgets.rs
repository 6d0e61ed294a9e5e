//! Who may have one more request now: GCRA per key and per client address
//! (`governor`), and a count of each key's requests in flight.
//!
//! **Shares.** Instances do not talk to each other per request. Each
//! knows how many instances serve (`set_instances`, from the heartbeats)
//! and enforces `1/N` of every budget: the rate divided by `N` and the
//! burst (and the cap in flight) divided by `N`, rounded down, at least 1.
//! GCRA with emission interval `T` and burst `b` admits at most
//! `b + t/T` requests in any window of length `t`; summed over the `N`
//! shares that is at most `rate·t + burst` for the key as a whole, however
//! its requests are spread (when `burst ≥ N`; below, each share keeps 1).
//! The cost: a key whose requests all reach one instance gets `1/N` of its
//! budget. While the instances disagree on `N` (for up to a heartbeat and
//! the liveness window after one starts or stops) a share may be too
//! large; and each share is made anew when `N` or the budget changes, full,
//! so every change may admit up to one more burst.
//!
//! Budgets of keys are kept by key digest, each a direct GCRA limiter
//! (budgets differ per key and change while running), for the life of the
//! process: one entry per key ever admitted, which the operator bounds, not
//! the clients (an unknown key is limited by address); addresses share one
//! keyed limiter whose idle entries are dropped (`forget_idle`), so that
//! a scan of many addresses does not grow memory for ever. IPv6 addresses
//! are counted per /64, the block one client usually holds.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use governor::clock::Clock;
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::{NotUntil, Quota, RateLimiter};
use http::HeaderValue;
use nohash_hasher::BuildNoHashHasher;

use super::fields::{self, Fields};
use crate::budget::{Budget, KeyLimits, Rate};
use crate::keys::KeyDigest;

/// The configured budgets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimits {
    /// Every key's budget, except what a key sets of its own.
    pub key: Budget,
    /// The rate of requests without a valid key, per client address.
    pub address_rate: Rate,
    /// Their burst.
    pub address_burst: NonZeroU32,
}

/// One instance's part of a budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Share {
    interval: Duration,
    burst: NonZeroU32,
    in_flight: u32,
}

impl Share {
    fn of(rate: Rate, burst: NonZeroU32, in_flight: u32, instances: u32) -> Share {
        let part = |whole: u32| (whole / instances).max(1);
        Share {
            interval: rate.interval() * instances,
            burst: NonZeroU32::new(part(burst.get())).expect("at least 1"),
            in_flight: part(in_flight),
        }
    }

    fn quota(self) -> Quota {
        Quota::with_period(self.interval)
            .expect("a rate of at most u32::MAX per second has a non-zero interval")
            .allow_burst(self.burst)
    }

    /// How long until a burst left with `remaining` is whole again.
    fn refill(self, remaining: u32) -> Duration {
        self.interval * self.burst.get().saturating_sub(remaining)
    }
}

type Direct<C> = RateLimiter<NotKeyed, InMemoryState, C, StateInformationMiddleware>;
type Keyed<C> = RateLimiter<IpAddr, DashMapStateStore<IpAddr>, C, StateInformationMiddleware>;

/// A key's GCRA for one budget and one count of instances.
struct KeyGcra<C: Clock + Clone> {
    budget: Budget,
    instances: u32,
    share: Share,
    limiter: Direct<C>,
    policy: HeaderValue,
}

/// What is kept per key. The count in flight outlives the GCRA, which is
/// replaced when the budget or the instances change.
struct KeyEntry<C: Clock + Clone> {
    in_flight: Arc<AtomicU32>,
    gcra: ArcSwap<KeyGcra<C>>,
}

/// The addresses' GCRA for one count of instances.
struct AddressGcra<C: Clock + Clone> {
    instances: u32,
    share: Share,
    limiter: Keyed<C>,
    policy: HeaderValue,
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Over {
    /// The key's rate and burst.
    Rate,
    /// The key's cap on requests in flight.
    InFlight,
    /// The address's rate and burst (no valid key).
    Address,
}

/// A request admitted: the fields its answer carries, and its place in
/// flight (a key's), given back when dropped.
#[derive(Debug)]
pub struct Admitted {
    /// The answer's `RateLimit-Policy` and `RateLimit`.
    pub fields: Fields,
    _slot: Option<Slot>,
}

/// A request refused.
#[derive(Debug)]
pub struct Refused {
    /// Which budget.
    pub over: Over,
    /// When the client may try again.
    pub retry_after: Duration,
    /// The budget as the client may be told it (the whole, not a share).
    pub budget: Budget,
    /// The answer's `RateLimit-Policy` and `RateLimit`.
    pub fields: Fields,
}

/// One of a key's requests in flight.
#[derive(Debug)]
struct Slot(Arc<AtomicU32>);

impl Slot {
    /// A place below `cap`, if one is free; and how many are left.
    fn take(count: &Arc<AtomicU32>, cap: u32) -> Option<(Slot, u32)> {
        let before = count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < cap).then_some(n + 1)
            })
            .ok()?;
        Some((Slot(Arc::clone(count)), cap - before - 1))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Every budget this instance enforces; see the module's documentation.
pub struct Budgets<C: Clock + Clone> {
    limits: RateLimits,
    clock: C,
    instances: AtomicU32,
    /// Read on every request by every thread, written once per key: a map
    /// swapped whole, so that a read takes no lock and writes nothing that
    /// other threads read (a `DashMap`'s shard lock and an `Arc`'s count,
    /// bounced between cores on every request; BENCHMARKS.md, issue 26).
    keys: ArcSwap<HashMap<KeyDigest, Arc<KeyEntry<C>>, BuildNoHashHasher<KeyDigest>>>,
    addresses: ArcSwap<AddressGcra<C>>,
}

impl<C: Clock + Clone> Budgets<C> {
    /// One instance's budgets, timed by `clock`.
    pub fn new(limits: RateLimits, clock: C) -> Budgets<C> {
        let addresses = ArcSwap::from_pointee(Self::address_gcra(&limits, &clock, 1));
        Budgets {
            limits,
            clock,
            instances: AtomicU32::new(1),
            keys: ArcSwap::default(),
            addresses,
        }
    }

    /// The configured budgets.
    pub fn limits(&self) -> &RateLimits {
        &self.limits
    }

    /// Enforces `1/instances` of every budget from now on.
    pub fn set_instances(&self, instances: u32) {
        self.instances.store(instances.max(1), Ordering::Relaxed);
    }

    fn address_gcra(limits: &RateLimits, clock: &C, instances: u32) -> AddressGcra<C> {
        let share = Share::of(limits.address_rate, limits.address_burst, 1, instances);
        AddressGcra {
            instances,
            share,
            limiter: RateLimiter::dashmap_with_clock(share.quota(), clock.clone())
                .with_middleware::<StateInformationMiddleware>(),
            policy: fields::address_policy(
                limits.address_burst.get(),
                limits.address_rate.interval(),
            ),
        }
    }

    /// Admits or refuses a request of the key `digest`, whose own
    /// settings are `own`.
    pub fn for_key(&self, digest: KeyDigest, own: KeyLimits) -> Result<Admitted, Refused> {
        let budget = own.over(self.limits.key);
        let instances = self.instances.load(Ordering::Relaxed);
        let mut keys = self.keys.load();
        if !keys.contains_key(&digest) {
            // Of concurrent first requests of a key one entry wins.
            self.keys.rcu(|keys| {
                let mut keys = HashMap::clone(keys);
                keys.entry(digest).or_insert_with(|| {
                    Arc::new(KeyEntry {
                        in_flight: Arc::default(),
                        gcra: ArcSwap::from_pointee(self.key_gcra(budget, instances)),
                    })
                });
                keys
            });
            keys = self.keys.load();
        }
        let entry = &keys[&digest];
        let mut gcra = entry.gcra.load();
        if gcra.budget != budget || gcra.instances != instances {
            let fresh = Arc::new(self.key_gcra(budget, instances));
            // Of concurrent replacements one wins, and every request uses it.
            entry.gcra.compare_and_swap(&*gcra, fresh);
            gcra = entry.gcra.load();
        }
        let share = gcra.share;
        let scale = |part: u32, whole: u32| part.saturating_mul(instances).min(whole);
        // The rate first: a request refused for the cap in flight has spent
        // its place in the rate, so that hammering at the cap is no free
        // way to keep a key's requests queued at the door.
        let remaining = match gcra.limiter.check() {
            Ok(snapshot) => snapshot.remaining_burst_capacity(),
            Err(not_until) => {
                let retry_after = self.wait(&not_until);
                let busy = entry.in_flight.load(Ordering::Acquire);
                let free = share.in_flight.saturating_sub(busy);
                return Err(Refused {
                    over: Over::Rate,
                    retry_after,
                    budget,
                    fields: Fields {
                        policy: fields::copied(&gcra.policy),
                        state: fields::key_state(
                            0,
                            retry_after,
                            scale(free, budget.in_flight.get()),
                        ),
                    },
                });
            }
        };
        let state = |free: u32| {
            fields::key_state(
                scale(remaining, budget.burst.get()),
                share.refill(remaining),
                scale(free, budget.in_flight.get()),
            )
        };
        match Slot::take(&entry.in_flight, share.in_flight) {
            Some((slot, free)) => Ok(Admitted {
                fields: Fields {
                    policy: fields::copied(&gcra.policy),
                    state: state(free),
                },
                _slot: Some(slot),
            }),
            None => Err(Refused {
                over: Over::InFlight,
                // Nothing says when one of them finishes: a second is a
                // fair guess, and the earliest a whole second can say.
                retry_after: Duration::from_secs(1),
                budget,
                fields: Fields {
                    policy: fields::copied(&gcra.policy),
                    state: state(0),
                },
            }),
        }
    }

    fn key_gcra(&self, budget: Budget, instances: u32) -> KeyGcra<C> {
        let share = Share::of(budget.rate, budget.burst, budget.in_flight.get(), instances);
        KeyGcra {
            budget,
            instances,
            share,
            limiter: RateLimiter::direct_with_clock(share.quota(), self.clock.clone())
                .with_middleware::<StateInformationMiddleware>(),
            policy: fields::key_policy(
                budget.burst.get(),
                budget.rate.interval(),
                budget.in_flight.get(),
            ),
        }
    }

    /// Admits or refuses a request without a valid key from `address`.
    pub fn for_address(&self, address: IpAddr) -> Result<Admitted, Refused> {
        let instances = self.instances.load(Ordering::Relaxed);
        let mut gcra = self.addresses.load();
        if gcra.instances != instances {
            let fresh = Arc::new(Self::address_gcra(&self.limits, &self.clock, instances));
            self.addresses.compare_and_swap(&*gcra, fresh);
            gcra = self.addresses.load();
        }
        let burst = self.limits.address_burst.get();
        let scale = |part: u32| part.saturating_mul(instances).min(burst);
        match gcra.limiter.check_key(&client_block(address)) {
            Ok(snapshot) => {
                let remaining = snapshot.remaining_burst_capacity();
                Ok(Admitted {
                    fields: Fields {
                        policy: fields::copied(&gcra.policy),
                        state: fields::address_state(
                            scale(remaining),
                            gcra.share.refill(remaining),
                        ),
                    },
                    _slot: None,
                })
            }
            Err(not_until) => {
                let retry_after = self.wait(&not_until);
                Err(Refused {
                    over: Over::Address,
                    retry_after,
                    budget: Budget {
                        rate: self.limits.address_rate,
                        burst: self.limits.address_burst,
                        in_flight: NonZeroU32::MAX,
                    },
                    fields: Fields {
                        policy: fields::copied(&gcra.policy),
                        state: fields::address_state(0, retry_after),
                    },
                })
            }
        }
    }

    fn wait(&self, not_until: &NotUntil<C::Instant>) -> Duration {
        not_until.wait_time_from(self.clock.now())
    }

    /// Drops the addresses whose budget is whole again (they would be
    /// made anew, identical), and the memory they held.
    pub fn forget_idle(&self) {
        let addresses = self.addresses.load();
        addresses.limiter.retain_recent();
        addresses.limiter.shrink_to_fit();
    }

    /// How many addresses are remembered.
    #[cfg(test)]
    fn addresses_held(&self) -> usize {
        self.addresses.load().limiter.len()
    }
}

/// The unit an address is counted in: itself for IPv4, its /64 for IPv6.
fn client_block(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(_) => address,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    fn n(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    /// Keys: 100/s, bursts of 10, 4 in flight; addresses: 1/s, bursts of 2.
    fn limits() -> RateLimits {
        RateLimits {
            key: Budget {
                rate: Rate::per_second(n(100)),
                burst: n(10),
                in_flight: n(4),
            },
            address_rate: Rate::per_second(n(1)),
            address_burst: n(2),
        }
    }

    const KEY: KeyDigest = KeyDigest([7; 32]);

    #[test]
    fn a_key_gets_its_burst_at_once_then_its_rate() {
        let clock = FakeRelativeClock::default();
        let budgets = Budgets::new(limits(), clock.clone());
        for _ in 0..10 {
            budgets.for_key(KEY, KeyLimits::default()).unwrap();
        }
        let refused = budgets.for_key(KEY, KeyLimits::default()).unwrap_err();
        assert_eq!(refused.over, Over::Rate);
        assert_eq!(refused.retry_after, Duration::from_millis(10));
        assert_eq!(
            refused.fields.state,
            "\"key\";r=0;t=1, \"key-in-flight\";r=4"
        );
        assert_eq!(
            refused.fields.policy,
            "\"key\";q=10;w=1, \"key-in-flight\";q=4;qu=\"concurrent-requests\""
        );
        clock.advance(Duration::from_millis(10));
        let admitted = budgets.for_key(KEY, KeyLimits::default()).unwrap();
        assert_eq!(
            admitted.fields.state,
            "\"key\";r=0;t=1, \"key-in-flight\";r=3"
        );
        assert!(budgets.for_key(KEY, KeyLimits::default()).is_err());
        // Another key has a budget of its own.
        assert!(
            budgets
                .for_key(KeyDigest([8; 32]), KeyLimits::default())
                .is_ok()
        );
    }

    #[test]
    fn the_cap_in_flight_refuses_the_extra_until_one_is_answered() {
        let clock = FakeRelativeClock::default();
        let budgets = Budgets::new(limits(), clock.clone());
        let own = KeyLimits {
            in_flight: Some(n(2)),
            ..KeyLimits::default()
        };
        let first = budgets.for_key(KEY, own).unwrap();
        let _second = budgets.for_key(KEY, own).unwrap();
        let refused = budgets.for_key(KEY, own).unwrap_err();
        assert_eq!(refused.over, Over::InFlight);
        assert_eq!(refused.retry_after, Duration::from_secs(1));
        drop(first);
        assert!(budgets.for_key(KEY, own).is_ok());
    }

    #[test]
    fn a_changed_budget_applies_to_the_next_request() {
        let clock = FakeRelativeClock::default();
        let budgets = Budgets::new(limits(), clock.clone());
        let strict = KeyLimits {
            burst: Some(n(1)),
            ..KeyLimits::default()
        };
        budgets.for_key(KEY, strict).unwrap();
        assert!(budgets.for_key(KEY, strict).is_err());
        // Back to the default: a fresh limiter with the default's burst.
        for _ in 0..10 {
            budgets.for_key(KEY, KeyLimits::default()).unwrap();
        }
        assert!(budgets.for_key(KEY, KeyLimits::default()).is_err());
    }

    #[test]
    fn addresses_are_limited_each_ipv6_per_64_and_forgotten_once_idle() {
        let clock = FakeRelativeClock::default();
        let budgets = Budgets::new(limits(), clock.clone());
        let one: IpAddr = "192.0.2.1".parse().unwrap();
        budgets.for_address(one).unwrap();
        budgets.for_address(one).unwrap();
        let refused = budgets.for_address(one).unwrap_err();
        assert_eq!(
            (refused.over, refused.retry_after),
            (Over::Address, Duration::from_secs(1))
        );
        assert_eq!(refused.fields.policy, "\"address\";q=2;w=2");
        assert!(budgets.for_address("192.0.2.2".parse().unwrap()).is_ok());
        let v6 = |text: &str| text.parse::<IpAddr>().unwrap();
        budgets.for_address(v6("2001:db8::1")).unwrap();
        budgets.for_address(v6("2001:db8::2:3")).unwrap();
        assert!(budgets.for_address(v6("2001:db8::ffff")).is_err());
        assert!(budgets.for_address(v6("2001:db8:0:1::1")).is_ok());
        assert_eq!(budgets.addresses_held(), 4);
        clock.advance(Duration::from_secs(3));
        budgets.forget_idle();
        assert_eq!(budgets.addresses_held(), 0);
    }

    /// Requests at `offered` per second for `seconds`, sent round-robin to
    /// instances of one key's budget, each counting the instances as
    /// `counts` says; the times (ms) of those admitted, and how many were
    /// refused.
    fn spread_counting(counts: &[u32], offered: u32, seconds: u32) -> (Vec<u64>, usize) {
        let clock = FakeRelativeClock::default();
        let each: Vec<_> = counts
            .iter()
            .map(|&count| {
                let budgets = Budgets::new(limits(), clock.clone());
                budgets.set_instances(count);
                budgets
            })
            .collect();
        let gap = Duration::from_secs(1) / offered;
        let (mut admitted, mut refused) = (Vec::new(), 0);
        for i in 0..offered * seconds {
            let now = gap * i;
            match each[i as usize % each.len()].for_key(KEY, KeyLimits::default()) {
                Ok(_) => admitted.push(now.as_millis() as u64),
                Err(_) => refused += 1,
            }
            clock.advance(gap);
        }
        (admitted, refused)
    }

    /// [`spread_counting`] with every instance counting them all.
    fn spread(instances: u32, offered: u32, seconds: u32) -> (Vec<u64>, usize) {
        spread_counting(&vec![instances; instances as usize], offered, seconds)
    }

    /// The most admitted in any window of `window` ms.
    fn worst_window(admitted: &[u64], window: u64) -> usize {
        admitted
            .iter()
            .enumerate()
            .map(|(first, &at)| admitted[first..].partition_point(|&t| t < at + window))
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn two_instances_together_admit_at_most_the_rate_plus_the_burst() {
        // 10 times the budget, split evenly between two instances.
        let (admitted, _) = spread(2, 1000, 5);
        for window in [1, 10, 100, 1000, 3000] {
            // rate·t + burst: 100/s is 0.1 per ms.
            let bound = (window / 10) as usize + 10;
            let worst = worst_window(&admitted, window);
            assert!(worst <= bound, "{worst} in {window} ms, bound {bound}");
        }
        // And most of the budget is used: 100/s over 5 s, plus the burst.
        assert!(admitted.len() >= 490, "{}", admitted.len());
    }

    #[test]
    fn while_the_instances_disagree_the_shares_sum_to_more_than_the_whole() {
        // A second instance has joined and counts two; the first still
        // counts one: together 1 + 1/2 of the budget.
        let (admitted, _) = spread_counting(&[1, 2], 1000, 2);
        let worst = worst_window(&admitted, 1000);
        assert!(worst > 100 + 10, "{worst}");
        assert!(worst <= 150 + 15, "{worst}");
    }

    #[test]
    fn a_key_at_80_percent_of_its_budget_is_never_refused() {
        for instances in [1, 2, 3] {
            let (admitted, refused) = spread(instances, 80, 10);
            assert_eq!((refused, admitted.len()), (0, 800), "{instances} instances");
        }
    }
}
